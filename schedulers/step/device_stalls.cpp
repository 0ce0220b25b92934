// split_stalls (device_stalls.hpp): each stall to the phase whose events bracket it.
#include "hzp/schedulers/step/device_stalls.hpp"

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

StallSplit split_stalls(std::span<const coll::Stall> stalls, std::span<const StallSpan> actions,
                        std::size_t step_end_from) {
  HZP_CHECK(step_end_from <= stalls.size(), "split_stalls: the step end starts at stall ", step_end_from, " of ",
            stalls.size());
  StallSplit out;
  std::size_t next = 0;  // first position not yet assigned to a phase
  auto add = [&](std::size_t from, std::size_t to, double& phase) {
    for (std::size_t i = from; i < to; ++i) phase += stalls[i].seconds;
  };
  for (const StallSpan& a : actions) {
    HZP_CHECK(a.begin >= next && a.begin <= a.end && a.end <= step_end_from, "split_stalls: action stalls [",
              a.begin, ", ", a.end, ") are not after ", next, " and within the ", step_end_from, " before the step end");
    add(next, a.begin, out.between);
    add(a.begin, a.end, a.forward ? out.forward : out.backward);
    next = a.end;
  }
  add(next, step_end_from, out.between);
  add(step_end_from, stalls.size(), out.step_end);
  for (const coll::Stall& s : stalls) ++(s.kind == coll::StallKind::at_issue ? out.at_issue : out.at_use);
  return out;
}

}  // namespace hzp::schedulers
