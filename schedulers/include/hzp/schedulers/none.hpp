// `none`: the single-rank reference scheduler, the oracle every other scheduler is checked against.
// No communicator, no sharding, and no code shared with the other schedulers' step logic (its learning-
// rate schedule, accumulation and update loop are its own), so a bug in shared scheduler components
// cannot hide by appearing on both sides of a parity test.
#pragma once

#include <memory>

#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

/// Per step: for each micro-batch in order, forward every unit then backward every unit, accumulating
/// gradients into one flat buffer (fp32; fp64 in fp64 mode); then the global gradient norm, the clipping
/// coefficient, and AdamW on the flat master parameters (bf16-mixed: fp32 master weights plus a bf16
/// working copy written by the update). State, by allocation tag: param (working parameters; the master
/// copy itself in fp32/fp64), master (bf16-mixed only), grad, m, v.
class NoneScheduler final : public Scheduler {
 public:
  /// Throws ConfigError for an invalid train config, a precision differing from the model's, or a
  /// communicator of more than one rank.
  explicit NoneScheduler(const SchedulerArgs& args);
  ~NoneScheduler() override;

  std::string_view name() const override { return "none"; }
  StepStats step(const StepBatch& batch) override;
  /// Every tensor of the flat buffers by name: param, master (bf16-mixed), grad (of the last step,
  /// before clipping), m, v. One rank, so no gathering.
  void visit_state(StateVisitor& visitor) override;
  /// The whole state (one rank writes it all): master, m, v, deterministic mode's scales, the model's own state.
  void checkpoint(StateArchive& archive) override;

  /// Flat views [N] for tests and parity checks: the master parameters (what AdamW updates), the
  /// working parameters forward reads (== master outside bf16-mixed), and the gradient accumulated
  /// by the last step (before clipping: the clip is applied as AdamW's gradient scale).
  ConstTensorView master_params() const;
  ConstTensorView working_params() const;
  ConstTensorView grads() const;

  /// The learning rate of step `step` (0-based): linear warm-up over train.warmup_steps from
  /// lr/warmup_steps to lr, then cosine from lr to train.lr_min reached at train.steps, lr_min after.
  static double learning_rate(const workloads::TrainConfig& train, std::int64_t step);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The registry's entry (scheduler_registry.cpp).
std::unique_ptr<Scheduler> make_none_scheduler(const SchedulerArgs& args);

}  // namespace hzp::schedulers
