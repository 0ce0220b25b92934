// Phase timers: how long the calling thread spent in each phase of a training step (forward, backward,
// recompute, optimizer, ...), measured where the work happens (the workload's unit calls, the
// scheduler's update) so that the harness can close a step's wall time into its parts (docs/run.md
// "Metrics").
// Exclusive: a phase nested in another (recompute inside backward) is not counted in its parent, so the
// totals of one thread never add up to more than its wall time. Each timed scope also reports a trace
// event when a trace sink is installed (trace_sink.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace hzp::profile {

enum class Phase : std::uint8_t {
  forward,        // a unit's forward (Workload::forward)
  backward,       // a unit's backward, its recompute excluded
  recompute,      // the forward re-run inside a backward under full activation recompute
  optimizer,      // norm, clipping and the update
  comm_wait,      // the thread blocked on a collective (reserved for the communication layer)
  pipeline_wait,  // the thread blocked on a pipeline peer
  data,           // filling a micro-batch from the data source
};
inline constexpr int kNumPhases = 7;

/// "forward", "backward", "recompute", "optimizer", "comm_wait", "pipeline_wait", "data".
std::string_view phase_name(Phase phase) noexcept;

/// Exclusive wall seconds and completed scopes per phase, of one thread since it started. Take the
/// difference of two readings for an interval.
struct PhaseTotals {
  std::array<double, kNumPhases> seconds{};
  std::array<std::uint64_t, kNumPhases> scopes{};

  double of(Phase p) const noexcept { return seconds[static_cast<int>(p)]; }
  PhaseTotals operator-(const PhaseTotals& earlier) const noexcept;
};

/// The calling thread's totals (scopes still open are not included yet).
PhaseTotals thread_phase_totals() noexcept;

/// Times one scope of `phase` on the calling thread. `label` (e.g. the unit's name) names the trace
/// event and must outlive the scope. Scopes nest strictly (RAII on one thread). Cheap: two clock reads,
/// plus one event when a trace sink is installed.
class ScopedPhase {
 public:
  explicit ScopedPhase(Phase phase, std::string_view label = {}) noexcept;
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Phase phase_;
  std::string_view label_;
  double start_s_;
  double nested_s_ = 0;  // wall time of the scopes nested directly inside this one
  ScopedPhase* parent_;
};

}  // namespace hzp::profile
