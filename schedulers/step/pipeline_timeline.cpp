// pipeline_timeline (pipeline_timeline.hpp): every stage's action list run against the others' finish times.
#include "hzp/schedulers/step/pipeline_timeline.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

PipelineTimeline pipeline_timeline(PipelineScheduleKind kind, const PipelineLayout& layout, int micro_batches,
                                   const std::vector<double>& forward_s, const std::vector<double>& backward_s) {
  const int pp = layout.pp, chunks = layout.chunks(), m = micro_batches;
  HZP_CHECK(static_cast<int>(forward_s.size()) == chunks && static_cast<int>(backward_s.size()) == chunks,
            "pipeline timeline: ", forward_s.size(), " forward and ", backward_s.size(), " backward times for ", chunks,
            " chunks");
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < pp; ++s) lists.push_back(pipeline_schedule(kind, layout, s, m));
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // Finish times of forward and backward of (micro-batch, chunk).
  std::vector<double> fwd(static_cast<std::size_t>(m * chunks), kNotYet), bwd(fwd);
  auto at = [&](int mb, int k) { return static_cast<std::size_t>(mb * chunks + k); };
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  std::vector<double> free_at(static_cast<std::size_t>(pp), 0.0);
  PipelineTimeline t;
  t.busy.assign(static_cast<std::size_t>(pp), 0.0);
  // Repeatedly run every action whose input is ready, in each stage's order; a pass that runs nothing while
  // actions remain is a deadlock.
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < pp; ++s) {
      auto& i = next[static_cast<std::size_t>(s)];
      while (i < lists[static_cast<std::size_t>(s)].size()) {
        const Action& a = lists[static_cast<std::size_t>(s)][i];
        const int k = layout.chunk_at(a);
        const bool forward = a.kind == Action::Kind::forward;
        const double ready = forward ? (k == 0 ? 0.0 : fwd[at(a.micro_batch, k - 1)])
                                     : (k == chunks - 1 ? fwd[at(a.micro_batch, k)] : bwd[at(a.micro_batch, k + 1)]);
        if (ready == kNotYet) break;
        const double d = forward ? forward_s[static_cast<std::size_t>(k)] : backward_s[static_cast<std::size_t>(k)];
        const double start = std::max(ready, free_at[static_cast<std::size_t>(s)]);
        free_at[static_cast<std::size_t>(s)] = start + d;
        (forward ? fwd : bwd)[at(a.micro_batch, k)] = start + d;
        t.busy[static_cast<std::size_t>(s)] += d;
        t.makespan = std::max(t.makespan, start + d);
        ++i;
        progressed = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s)
    HZP_CHECK(next[static_cast<std::size_t>(s)] == lists[static_cast<std::size_t>(s)].size(),
              "pipeline timeline: stage ", s, " is stuck at action ", next[static_cast<std::size_t>(s)], " of ",
              lists[static_cast<std::size_t>(s)].size(), " (", to_string(kind), ", m = ", m, ")");
  t.chunks = chunks;
  t.forward_end = std::move(fwd);
  t.backward_end = std::move(bwd);
  return t;
}

}  // namespace hzp::schedulers
