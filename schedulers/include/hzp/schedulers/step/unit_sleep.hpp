// scheduler.debug_unit_sleep_ms, a benchmark hook (`run` and `simulate` refuse it unless
// HZPBENCH_BENCHMARK_HOOKS=1): a fixed sleep after every block's forward and backward, so that a unit's time is
// known and costs no CPU. Oversubscribed ranks (8 on 2 cores) then measure the model's step, not the machine's
// contention. One rule for everything that runs units: the step's whole-model path (StepDriver), a pipeline stage
// (PipelineStage), and the compute calibration of a run's links and of `simulate`'s unit times
// (measure_model_rate), so that the run and the simulator are charged the same unit time.
#pragma once

#include <chrono>
#include <thread>

#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

class UnitSleep {
 public:
  UnitSleep() = default;
  explicit UnitSleep(const SchedulerOptions& o) : block_s_(o.debug_unit_sleep_ms * 1e-3) {}

  /// The sleep after unit u's forward or backward in a model of `units` units: the option's for a block, none
  /// for the ends (the embedding, unit 0, and the head, the last), so balanced pipeline chunks hold equal work
  /// whatever the cut does with the ends.
  double of(int u, int units) const noexcept { return block_s_ > 0 && u > 0 && u < units - 1 ? block_s_ : 0; }
  void after(int u, int units) const {
    if (const double s = of(u, units); s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
  }
  double block_seconds() const noexcept { return block_s_; }

 private:
  double block_s_ = 0;
};

}  // namespace hzp::schedulers
