// The step driver (step_driver.hpp): data, the schedule's actions over a parameter engine, deterministic
// mode's retries, the step end and the StepStats.
#include "hzp/schedulers/step/step_driver.hpp"

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::schedulers {

StepDriver::StepDriver(std::string scheduler, const workloads::Workload& model, const workloads::TrainConfig& train,
                       CachingAllocator& alloc, int rank, int world_size)
    : scheduler_(std::move(scheduler)), model_(model), train_(train), rank_(rank), world_size_(world_size) {
  const workloads::BatchPlan plan(train_.global_batch, train_.micro_batch_size, world_size_);
  actions_ = sequential_schedule(static_cast<int>(plan.micro_batches_of(rank_).size()), model_.layout().num_units());
  check_schedule(actions_, static_cast<int>(plan.micro_batches_of(rank_).size()), model_.layout().num_units());
  ctx_ = model_.make_context(alloc, {.micro_batch_size = train_.micro_batch_size, .recompute = train_.recompute});
  inputs_.resize(static_cast<std::size_t>(train_.micro_batch_size * model_.seq_len()));
  targets_.resize(inputs_.size());
}

StepStats StepDriver::step(const StepBatch& batch, ParameterEngine& engine) {
  const Stopwatch whole;
  HZP_CHECK(batch.source != nullptr, scheduler_, ": step ", batch.step, " has no data source");
  HZP_CHECK(batch.step == steps_done_, scheduler_, ": steps run in order; expected step ", steps_done_, ", got ",
            batch.step);
  const workloads::BatchPlan plan(train_.global_batch, train_.micro_batch_size, world_size_);
  const std::vector<std::int64_t> mine = plan.micro_batches_of(rank_);
  const double normaliser = static_cast<double>(train_.global_batch * model_.seq_len());
  const int units = model_.layout().num_units();
  FixedPointGrads* fixed = engine.fixed_point();

  std::vector<double> losses(mine.size(), 0.0);  // per micro-batch, in local order
  // Deterministic mode: an attempt whose fixed-point tally overflowed anywhere runs again (the same verdict
  // on every rank); otherwise the body runs once.
  for (bool accepted = false; !accepted;) {
    if (fixed) fixed->begin_attempt(batch.step);
    engine.begin_attempt(batch.step, actions_);
    for_each_unit_call(actions_, [&](const Action& a, int u) {
      if (a.kind == Action::Kind::forward) {
        if (u == 0) {
          workloads::fill_micro_batch(*batch.source, plan, batch.step, mine[static_cast<std::size_t>(a.micro_batch)],
                                      inputs_, targets_);
          ctx_->begin(inputs_, targets_, normaliser);
        }
        model_.forward(u, engine.unit_params(u, a), *ctx_);
        engine.forward_done(u, a);
        if (u == units - 1) losses[static_cast<std::size_t>(a.micro_batch)] = ctx_->loss();
      } else {
        // Parameters first, then gradient buffers: an engine with rings hands them out in that order.
        const workloads::UnitParams params = engine.unit_params(u, a);
        const workloads::UnitGrads grads = engine.unit_grads(u, a);
        model_.backward(u, params, *ctx_, grads);
        engine.backward_done(u, a);
      }
    });
    engine.attempt_done();
    accepted = !fixed || conclude_fixed_point_attempt(*fixed, engine.verdict_group());
    if (!accepted) engine.attempt_voided();
  }
  const double compute_seconds = whole.wall();

  const StepFinish end = engine.finish_step(batch.step, scheduled_learning_rate(train_, batch.step));
  ++steps_done_;
  StepStats st = data_parallel_step_stats(batch.step, engine.scalars(), plan, losses, fixed, end.update,
                                          train_.global_batch * model_.seq_len(), compute_seconds,
                                          end.optimizer_seconds, 0);
  st.background_waits = engine.background_waits();
  st.seconds = whole.wall();
  return st;
}

void StepDriver::plan_collectives(const workloads::TrainConfig& train, const workloads::ParamLayout& layout,
                                  const PlanGroup& group, const PlanGroup& verdict, std::int64_t micro_batches,
                                  CollectiveLedger& out) {
  if (!train.deterministic) {
    out.all_reduce(group, 1, DType::f64, 1, "per step (loss)");  // data_parallel_step_stats
    return;
  }
  // conclude_fixed_point_attempt: every tensor's maximum and the two overflow flags; ordered_global_loss.
  std::int64_t tensors = 0;
  for (const workloads::Unit& u : layout.units()) tensors += static_cast<std::int64_t>(u.tensors.size());
  out.all_reduce(verdict, tensors + 2, DType::f64, 1, "per attempt (fixed-point tally, max)");
  out.all_gather(group, micro_batches, DType::f64, 1, "per step (loss per micro-batch)");
}

}  // namespace hzp::schedulers
