// What pipeline stages add to an engine's declaration for the plan, whichever engine holds the stage's weights
// (nd's ddp or distributed optimizer, asynchzp): the stage's layout and schedule, the activations (forward) and
// their gradients (backward) received from and sent to the neighbouring chunks' stages at the edges of each action
// (PipelineStage::run), the group of the stages holding the tied table (Megatron's embedding group) and the losses'
// sum over the pipeline group (StepDriver::plan_pipeline_collectives). Private to hzp_schedulers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hzp/collectives/mesh.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/pipeline_schedule.hpp"
#include "hzp/schedulers/step/process_groups.hpp"

namespace hzp::schedulers {

class PipelinePlan {
 public:
  /// Inactive at pp = 1: layout() is `whole`. At pp > 1: the cut from the options over whole's units, this rank's
  /// stage (its place on the mesh's pipeline axis) and that stage's layout; the activations' size from the model
  /// (ConfigError without it).
  PipelinePlan(const PlanInputs& in, const ParallelDims& dims, const coll::RankMesh& mesh,
               const workloads::ParamLayout& whole);

  bool active() const noexcept { return pp_ > 1; }
  /// The layout this rank's engine shards: its stage's, or the whole model's.
  const workloads::ParamLayout& layout() const noexcept { return *layout_; }
  /// The stage's schedule over its `micro_batches` (empty when inactive: the driver's sequential one).
  std::vector<Action> actions(const SchedulerOptions& options, std::int64_t micro_batches) const;
  int chunks_per_stage() const noexcept { return pipeline_ ? pipeline_->v : 1; }
  /// The shared units this stage holds (shared_units of its layout) and the group summing their gradient.
  const PlanGroup& embedding() const noexcept { return embedding_; }
  /// The activation messages at the edges of action a around its unit u.
  void unit(const Action& a, int u, CollectiveLedger& out) const;
  /// The micro-batch losses summed over the pipeline group, once per step.
  void step_end(std::int64_t micro_batches_per_rank, CollectiveLedger& out) const;

 private:
  int pp_ = 1, stage_ = 0;
  std::unique_ptr<PipelineLayout> pipeline_;
  std::unique_ptr<workloads::ParamLayout> layout_;
  PlanGroup pp_group_, embedding_;
  std::int64_t boundary_ = 0;
  DType adt_ = DType::f32;
};

}  // namespace hzp::schedulers
