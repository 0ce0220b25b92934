// asynchzp (issue 9, docs/data-parallel.md "asynchzp"): hierarchical sharding (z3 parameters, z2
// gradients, z1 optimizer states) with collectives inline or on two background threads. What tests, the harness and the
// benchmark see beyond DataParallelScheduler: the scheduling statistics of the asynchronous mode.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hzp/schedulers/data_parallel.hpp"

namespace hzp::schedulers {

/// Counted over the scheduler's life (the times of the last step only).
struct AsyncHzpStats {
  std::uint64_t gathers = 0;            ///< parameter all-gathers of units issued by the parameter thread
  std::uint64_t scatters = 0;           ///< gradient reduce-scatters of units issued by the gradient thread
  std::uint64_t gather_fallbacks = 0;   ///< units gathered inline because they did not fit the pool
  std::uint64_t scatter_fallbacks = 0;  ///< units reduce-scattered inline because they did not fit the pool
  /// Last step, per gather of the schedule (in order): when the parameter thread started it and when
  /// the compute thread asked for it (just after the previous unit call returned). wall_seconds().
  std::vector<double> gather_issued_s, gather_wanted_s;
  double gather_wait_s = 0;   ///< last step: compute thread blocked waiting for gathered parameters
  double scatter_wait_s = 0;  ///< last step: compute thread blocked draining reduce-scatters
  /// On a CUDA compute stream (also inline), last step: the time the compute stream stalled waiting for
  /// communication, from timed events around each of its waits (the device's exposed communication), and how
  /// many waits there were where results are used and where collectives are issued (async: none at issue).
  double device_wait_s = 0;
  std::uint64_t device_waits_at_use = 0, device_waits_at_issue = 0;
};

class AsyncHzpScheduler : public DataParallelScheduler {
 public:
  /// The background threads' counts are zero when scheduler.async = false; the device fields are set on a GPU.
  virtual AsyncHzpStats async_stats() const = 0;
};

/// Registry entry: ConfigError naming every value for group sizes that are not nested (z3 | z2 | z1 | W),
/// a bad prefetch or pool size, or (pool_fallback = error) a unit larger than its ring.
std::unique_ptr<Scheduler> make_asynchzp_scheduler(const SchedulerArgs& args);

}  // namespace hzp::schedulers
