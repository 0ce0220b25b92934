// What context parallelism adds to an engine's declaration for the plan, whichever engine holds the weights (nd's
// ddp or distributed optimizer, asynchzp): each block's ring attention sends its K and V blocks (and in backward
// their gradients) to the next rank of the cp group and receives as many from the previous, as the model declares
// them (ModelSpec::context_parallel_messages), and the step sums each micro-batch's loss shares over cp
// (StepDriver::plan_context_collectives). Private to hzp_schedulers.
#pragma once

#include <cstdint>

#include "hzp/collectives/mesh.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/tensor_parallel.hpp"

namespace hzp::schedulers {

/// The model's run as its tensor- and context-parallel declarations need it (degrees from `dims`).
workloads::TensorParallelRun model_run(const PlanInputs& in, const ParallelDims& dims);

class ContextParallelPlan {
 public:
  /// Inactive at cp = 1. At cp > 1: ConfigError unless the model is given (its ring's messages) and 2·cp divides
  /// its sequence length; `mesh` places in.rank in its cp group.
  ContextParallelPlan(const PlanInputs& in, const ParallelDims& dims, const coll::RankMesh& mesh);

  bool active() const noexcept { return cp_ > 1; }
  const PlanGroup& group() const noexcept { return group_; }
  /// The ring's messages inside unit u of action a (nothing when inactive or the unit has no attention).
  void unit(const Action& a, int u, CollectiveLedger& out) const;
  /// The loss shares' sum over cp, once per step.
  void step_end(std::int64_t micro_batches_per_rank, CollectiveLedger& out) const;

 private:
  int cp_ = 1, rank_ = 0;
  PlanGroup group_;
  workloads::TensorParallelRun run_;
  const workloads::ModelSpec* spec_ = nullptr;
};

}  // namespace hzp::schedulers
