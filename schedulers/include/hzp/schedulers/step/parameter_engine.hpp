// A parameter engine: where one data-parallel layout keeps its parameters, gradients and optimizer states,
// and when its collectives run. The step driver (step_driver.hpp) owns the loop over a schedule's actions
// and asks the engine, unit by unit, for the parameters to compute with and the gradient buffers to write,
// and tells it when a unit's forward or backward is done; the engine gathers, reduces, converts (the
// deterministic mode's fixed point) and frees accordingly, and finishes the step (the step-end exchange,
// the norm and the update). ddp, zero1/2/3 and hsdp, and asynchzp are engines; a new layout is one more.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::schedulers {

/// What finishing a step gives the driver.
struct StepFinish {
  OptimizerStepResult update;
  double optimizer_seconds = 0;  ///< what the engine counts as optimizer time (its update; see each engine)
};

class ParameterEngine {
 public:
  virtual ~ParameterEngine() = default;

  /// An attempt of step `step` begins over the rank's `micro_batches` micro-batches, in the schedule
  /// `actions` (a deterministic-mode retry begins another attempt of the same step).
  virtual void begin_attempt(std::int64_t step, const std::vector<Action>& actions) = 0;
  /// Micro-batch `micro_batch`'s input tokens on this rank, before its forward (without pipeline stages).
  virtual void micro_batch_tokens(int /*micro_batch*/, std::span<const std::int32_t> /*inputs*/) {}
  /// Unit u's full parameters for `a` (valid until the matching *_done call).
  virtual workloads::UnitParams unit_params(int u, const Action& a) = 0;
  /// Unit u's forward for `a` is done.
  virtual void forward_done(int u, const Action& a) = 0;
  /// The gradient buffers unit u's backward for `a` writes (accumulate flags included).
  virtual workloads::UnitGrads unit_grads(int u, const Action& a) = 0;
  /// Unit u's backward for `a` is done: the blocks whose gradients are final may be reduced.
  virtual void backward_done(int u, const Action& a) = 0;
  /// Every action of the attempt ran (a last collective may be awaited here, inside the compute time).
  virtual void attempt_done() {}
  /// Deterministic mode: the attempt was void (an element out of the fixed-point range somewhere) and runs
  /// again; work still queued for it must finish first.
  virtual void attempt_voided() {}

  /// Deterministic mode's fixed-point sums (nullptr otherwise) and the group that takes the verdict on an
  /// attempt (every rank that converts micro-batch gradients).
  virtual FixedPointGrads* fixed_point() noexcept = 0;
  virtual coll::Communicator& scalars() noexcept = 0;
  /// The group that takes deterministic mode's verdict on an attempt: every rank that converts gradients. The
  /// scalars' group unless the model is split further (tensor parallelism: the whole world, since each piece
  /// may overflow on its own ranks while the loss is still reduced over data parallelism alone).
  virtual coll::Communicator& verdict_group() noexcept { return scalars(); }

  /// After the accepted attempt: gradients combined, the norm, clipping and the update at `lr`.
  virtual StepFinish finish_step(std::int64_t step, double lr) = 0;
  /// Waits of the compute thread on background communication during the step (asynchzp), for the harness.
  virtual std::vector<std::pair<double, double>> background_waits() { return {}; }
};

}  // namespace hzp::schedulers
