// The step driver: the one training-step loop of the data-parallel schedulers. It runs a schedule's actions
// (data loading, forward and backward unit by unit) over a parameter engine, reruns an attempt that
// deterministic mode voids, lets the engine finish the step, and reports StepStats (the loss in fp64 in
// global micro-batch order in deterministic mode, summed over ranks otherwise). `none`, the single-rank
// reference, keeps a loop of its own on purpose: it is the oracle the driver's schedulers are compared with.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/parameter_engine.hpp"
#include "hzp/schedulers/step/schedule.hpp"

namespace hzp::schedulers {

class StepDriver {
 public:
  /// `rank` of `world_size` data-parallel ranks; the model and allocator must outlive the driver.
  StepDriver(std::string scheduler, const workloads::Workload& model, const workloads::TrainConfig& train,
             CachingAllocator& alloc, int rank, int world_size);

  /// The schedule the driver runs for each step (default: sequential over the rank's micro-batches).
  const std::vector<Action>& schedule() const noexcept { return actions_; }
  /// Runs step `batch.step` over `engine`. Steps run in order 0, 1, 2, ... (PreconditionError otherwise).
  StepStats step(const StepBatch& batch, ParameterEngine& engine);

  /// The collectives step() issues itself, declared for the plan (step/engine_plan.hpp), over `group` (the
  /// engine's scalars communicator: its data-parallel ranks): the loss's all-reduce; in deterministic mode
  /// the fixed-point tally's MAX all-reduce (once per attempt; a plan counts one) and the all-gather of the
  /// micro-batch losses, summed in global order.
  /// The tally runs over `verdict` (the engine's verdict_group).
  static void plan_collectives(const workloads::TrainConfig& train, const workloads::ParamLayout& layout,
                               const PlanGroup& group, const PlanGroup& verdict, std::int64_t micro_batches,
                               CollectiveLedger& out);

 private:
  std::string scheduler_;
  const workloads::Workload& model_;
  workloads::TrainConfig train_;
  int rank_, world_size_;
  std::vector<Action> actions_;
  std::unique_ptr<workloads::MicroBatchContext> ctx_;
  std::vector<std::int32_t> inputs_, targets_;
  std::int64_t steps_done_ = 0;
};

}  // namespace hzp::schedulers
