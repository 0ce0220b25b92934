// Turns the compute stream's settled stalls on communication (coll::DeviceStallClock) into a step's exposed
// communication on the device, split by the phase each stall fell in. On a GPU the step driver's forward,
// backward and step-end times are device intervals between events on the same stream, so a stall inside one of
// them is in that figure too: the split says how much to take out of each, so that the harness's closure
// (compute + exposed communication + optimizer + other = step time, docs/run.md) counts every stall once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "hzp/collectives/device_stall_clock.hpp"

namespace hzp::schedulers {

/// One action of the step, as positions in the clock's stalls: those recorded between its start and end events
/// are [begin, end).
struct StallSpan {
  std::size_t begin = 0, end = 0;
  bool forward = true;
};

struct StallSplit {
  double forward = 0, backward = 0;  ///< inside forward / backward actions
  double step_end = 0;               ///< after the last action (the engine's finish: reductions, refreshes)
  double between = 0;                ///< before the first action or between actions (no device phase holds them)
  std::uint64_t at_issue = 0, at_use = 0;
  double total() const noexcept { return forward + backward + step_end + between; }
};

/// Stalls at positions >= `step_end_from` are the step end's. PreconditionError when a span is reversed, overlaps
/// the previous one, or reaches past `stalls` or `step_end_from`.
StallSplit split_stalls(std::span<const coll::Stall> stalls, std::span<const StallSpan> actions,
                        std::size_t step_end_from);

}  // namespace hzp::schedulers
