// The step driver: the one training-step loop of the data-parallel schedulers. It runs a schedule's actions
// (data loading, forward and backward unit by unit) over a parameter engine, reruns an attempt that
// deterministic mode voids, lets the engine finish the step, and reports StepStats (the loss in fp64 in
// global micro-batch order in deterministic mode, summed over ranks otherwise). `none`, the single-rank
// reference, keeps a loop of its own on purpose: it is the oracle the driver's schedulers are compared with.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/device_stalls.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/parameter_engine.hpp"
#include "hzp/schedulers/step/pipeline_stage.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::schedulers {

/// The pipeline cut of a model of `units` units from scheduler.pp, scheduler.schedule, scheduler.virtual_stages and
/// scheduler.pp_layers (balanced unless pp_layers lists the blocks per stage). ConfigError naming the keys when
/// interleaved has virtual_stages < 2, another schedule virtual_stages > 1, pp_layers is given with
/// virtual_stages > 1 or does not have pp entries, or a chunk would get no block.
PipelineLayout pipeline_layout_from(const SchedulerOptions& options, int units);

/// A step run as one stage of a pipeline (nd with scheduler.pp > 1).
struct StepPipeline {
  coll::Communicator* group = nullptr;  ///< the pipeline group; this rank's stage is its rank there
  PipelineLayout layout;
  PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b;
};

/// The pipeline a data-parallel engine's step runs: none (nullopt) unless `groups` has pp > 1, else the
/// options' layout over the model's `units` and the groups' pipeline communicator.
std::optional<StepPipeline> step_pipeline(const SchedulerOptions& options, const ProcessGroups& groups, int units);

class StepDriver {
 public:
  /// `rank` of `world_size` data-parallel ranks; the model and allocator must outlive the driver. With
  /// `pipeline` the rank runs its stage's schedule (the model holds that stage's units) through a PipelineStage,
  /// and the losses, which only the last stage computes, are summed over the pipeline group. With `context` (the
  /// context-parallel group, nullptr without one; its size must be the model's context_shard()'s) every micro-batch
  /// is read whole and cut to the rank's share, and the shares of each micro-batch's loss are summed over it.
  /// On a CUDA `stream` (the allocator's device) the model runs there, each action's forward and backward are
  /// timed by events on it (StepStats::device_timed), and the step ends with the stream synchronised: its one wait
  /// for the device besides the values that must reach the host (docs/cuda.md). A pipeline stage runs there too
  /// (pipeline_stage.hpp); context parallelism on the host only.
  StepDriver(std::string scheduler, const workloads::Workload& model, const workloads::TrainConfig& train,
             CachingAllocator& alloc, int rank, int world_size, std::optional<StepPipeline> pipeline = std::nullopt,
             coll::Communicator* context = nullptr, StreamRef stream = StreamRef::host());
  ~StepDriver();

  /// The schedule the driver runs for each step (sequential over the rank's micro-batches, or the stage's).
  const std::vector<Action>& schedule() const noexcept { return actions_; }
  /// The benchmark hook scheduler.debug_unit_sleep_ms (unit_sleep.hpp) on every block's forward and backward,
  /// whole-model and pipeline alike: every engine sets it from its options right after building the driver.
  void set_unit_sleep(UnitSleep sleep);
  /// A resumed run (Scheduler::checkpoint): the next step() is `next_step` instead of 0.
  void resume_at(std::int64_t next_step) { steps_done_ = next_step; }
  /// Runs step `batch.step` over `engine`. Steps run in order 0, 1, 2, ... (PreconditionError otherwise).
  /// On a CUDA stream the compute stream's waits on communication are timed on the device for the whole step
  /// (StepStats::device_comm_timed): the collectives the engine issues on this thread and stream, and the waits it
  /// brackets with coll::time_device_wait. The model's tensor-parallel collectives are kept on that stream and
  /// completed (counters recorded, deadlines enforced) after the engine's finish_step, once per step.
  StepStats step(const StepBatch& batch, ParameterEngine& engine);
  /// The last step's stalls by phase and kind (all zero on the host).
  const StallSplit& device_stalls() const noexcept { return stalls_; }

  /// The collectives step() issues itself, declared for the plan (step/engine_plan.hpp), over `group` (the
  /// engine's scalars communicator: its data-parallel ranks): the loss's all-reduce; in deterministic mode
  /// the fixed-point tally's MAX all-reduce (once per attempt; a plan counts one) and the all-gather of the
  /// micro-batch losses, summed in global order.
  /// The tally runs over `verdict` (the engine's verdict_group).
  static void plan_collectives(const workloads::TrainConfig& train, const workloads::ParamLayout& layout,
                               const PlanGroup& group, const PlanGroup& verdict, std::int64_t micro_batches,
                               CollectiveLedger& out);
  /// What step() adds under pipeline parallelism: the micro-batch losses summed over `pipeline` (from the last
  /// stage) once per step.
  static void plan_pipeline_collectives(const PlanGroup& pipeline, std::int64_t micro_batches, CollectiveLedger& out);
  /// What step() adds under context parallelism: the micro-batch losses, and after them the model's
  /// `step_statistics` (Workload::take_step_statistics: each cp rank's tokens' MoE load), summed over `context` in
  /// one call once per step.
  static void plan_context_collectives(const PlanGroup& context, std::int64_t micro_batches,
                                       std::int64_t step_statistics, CollectiveLedger& out);

 private:
  /// Sums the model's step statistics `stats` (already summed over the cp group) over `data_parallel` and ends the
  /// model's step (workload.hpp).
  void end_model_step(std::vector<double> stats, coll::Communicator& data_parallel);
  // What every attempt of a step shares: the batch, its plan, this rank's micro-batches, the loss normaliser.
  struct Attempt {
    const StepBatch& batch;
    const workloads::BatchPlan& plan;
    const std::vector<std::int64_t>& mine;
    double normaliser;
  };
  // One attempt's actions over the whole model, or as a pipeline stage (returns the seconds waited on peers).
  void run_whole(const Attempt& at, ParameterEngine& engine, std::vector<double>& losses);
  double run_stage(const Attempt& at, ParameterEngine& engine, std::vector<double>& losses);
  // Micro-batch `mb`'s tokens as the context takes them: whole sequences, or the rank's context-parallel share.
  /// Micro-batch mb's tokens, and with document packing each token's document start (`first`, global positions;
  /// left empty without packing); under context parallelism the rank's share of each.
  void fill_tokens(const Attempt& at, int mb, std::span<std::int32_t> inputs, std::span<std::int32_t> targets,
                   std::span<std::int32_t> first);


  std::string scheduler_;
  const workloads::Workload& model_;
  workloads::TrainConfig train_;
  int rank_, world_size_;
  std::vector<Action> actions_;
  // The model's own collectives (tensor parallelism's, ring attention's exchanges; ContextOptions::requests): kept
  // on a CUDA stream and completed once per step after the engine's step end (its norm synchronised the stream),
  // waited for at once on the host. Declared before the contexts, which point to it.
  coll::StreamOrderedRequests model_requests_;
  std::unique_ptr<workloads::MicroBatchContext> ctx_;
  std::vector<std::int32_t> inputs_, targets_, first_;                    // what the context takes
  std::vector<std::int32_t> whole_inputs_, whole_targets_, whole_first_;  // context parallelism: before the cut
  std::int64_t steps_done_ = 0;
  std::optional<StepPipeline> pipeline_;
  std::unique_ptr<PipelineStage> stage_;
  UnitSleep unit_sleep_;
  coll::Communicator* context_ = nullptr;
  StreamRef stream_ = StreamRef::host();
  // On a CUDA stream: an event before and after each action of the schedule, recorded on the stream.
  std::vector<TimedEvent> marks_;
  TimedEvent end_mark_;
  // On a CUDA stream: the stream's stalls on communication, and the clock's position at each of marks_ (so each
  // stall is known to lie inside an action or between actions), and the last step's split.
  std::unique_ptr<coll::DeviceStallClock> stall_clock_;
  std::vector<std::size_t> stall_marks_;
  StallSplit stalls_;
  // Forward and backward seconds of the step's actions, from marks_ (after the stream has passed them).
  std::pair<double, double> device_phase_seconds() const;
  // Action i's start (end = false) or end on the device: its event, and the stall clock's position there. Both
  // the whole-model and the pipeline path mark through this, so every stall falls in the phase that holds it.
  void mark_action(std::size_t i, bool end);
};

}  // namespace hzp::schedulers
