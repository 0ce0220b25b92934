// Pieces every data-parallel step needs that are not communication patterns: validating W against the
// micro-batch count and a group size (messages naming every value), this rank's micro-batches, and the
// global loss (local micro-batch losses summed, then all-reduced in fp64).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::schedulers {

/// ConfigError naming scheduler, world size, group size, train.global_batch, train.micro_batch_size and
/// the micro-batch count, listing every problem: W < 1; group_size not dividing W (when group_size > 0);
/// micro-batches per step not a multiple of the data-parallel degree `dp` (0: dp = W, every rank a data-parallel
/// rank). Also validates train and the model's precision.
void validate_data_parallel(std::string_view scheduler, const SchedulerArgs& args, int group_size, int dp = 0);

/// The degrees a data-parallel scheduler runs with (after validate_data_parallel): every rank is a
/// data-parallel rank, the model state sharded over `shard` consecutive ranks (1: ddp's full replicas; W:
/// zero1-3; scheduler.group_size: hsdp; scheduler.z1: asynchzp) and replicated over W / shard.
ParallelDims data_parallel_dims(int world_size, int shard);
/// The process groups of scheduler `name`'s degrees (scheduler_parallel_dims): args.groups when the caller
/// built them (ConfigError when their degrees are not the scheduler's), else split from args.world on
/// args.topology (one node when absent) into `owned`, collective over args.world.
const ProcessGroups& scheduler_groups(std::string_view name, const SchedulerArgs& args,
                                      std::unique_ptr<ProcessGroups>& owned);

/// ConfigError unless the model is split over exactly the groups' tensor-parallel degree: every sharded tensor of
/// its layout is a piece of `tp` (group "tp") with the group's rank as its index, and at least one is sharded when
/// tp > 1 (a model built without its tensor-parallel group would silently train tp copies of the whole model).
void check_tensor_parallel_model(std::string_view scheduler, const ProcessGroups& groups,
                                 const workloads::Workload& model);

/// ConfigError unless the model runs exactly the groups' context-parallel share: with cp > 1 its context_shard()
/// is rank context()->rank() of cp; with cp = 1 it has none (a model built without its group would train every
/// rank on whole sequences while the engines sum cp ranks' gradients as if each held a share).
void check_context_parallel_model(std::string_view scheduler, const ProcessGroups& groups,
                                  const workloads::Workload& model);

/// The gradient contributions summed into one step's gradient: one per micro-batch, times cp (each context-parallel
/// rank's share of a micro-batch is a contribution of its own). Deterministic mode's limit divides by it.
std::int64_t gradient_summands(const workloads::TrainConfig& train, const ParallelDims& dims);

/// Whether deterministic mode takes its verdict on an attempt over the whole world: when the model is split into
/// tensor pieces, pipeline stages or context-parallel shares (tp, pp or cp > 1), each of which may overflow on its
/// own ranks, while the loss is still summed over data parallelism alone. The engines and their plans ask this.
bool verdict_over_world(const ParallelDims& dims);

/// What a data-parallel engine adds when its model is split over the groups' tensor-parallel group, pipeline
/// stages or context-parallel group (nd): an uncounted duplicate of the tensor-parallel group for the dumps' gathers
/// of whole tensors, and in deterministic mode the whole world for the verdict on an attempt (verdict_over_world).
/// Without a split it holds nothing. Collective over the world.
class TensorParallelExtras {
 public:
  TensorParallelExtras(const ProcessGroups& groups, bool deterministic);
  /// The tensor-parallel group (nullptr without one), its size and this rank's place in it.
  coll::Communicator* group() const noexcept { return tp_; }
  int size() const noexcept { return tp_ ? tp_->size() : 1; }
  int rank() const noexcept { return tp_ ? tp_->rank() : 0; }
  /// The uncounted duplicate for visit_gathered_state (nullptr without tensor parallelism).
  coll::Communicator* debug() const noexcept { return debug_.get(); }
  /// ParameterEngine::verdict_group: the world under tensor or pipeline parallelism in deterministic mode, else
  /// `scalars`.
  coll::Communicator& verdict_or(coll::Communicator& scalars) const noexcept { return verdict_ ? *verdict_ : scalars; }

 private:
  coll::Communicator* tp_;
  std::unique_ptr<coll::Communicator> debug_, verdict_;
};

/// Sum of `local` over `comm` (fp64, blocking): the global mean loss when each rank passes the sum of its
/// micro-batches' loss() values.
double all_reduce_sum(coll::Communicator& comm, double local);

/// The StepStats every data-parallel step reports: the global loss (all_reduce_sum of `local_loss` over
/// `scalars`), the optimizer's norm/clip/lr, the global batch's tokens and the given timings.
StepStats data_parallel_step_stats(std::int64_t step, coll::Communicator& scalars, double local_loss,
                                   const OptimizerStepResult& r, std::int64_t tokens, double compute_seconds,
                                   double optimizer_seconds, double seconds);
/// The same from this rank's micro-batch losses (`losses`, in its local order) in either mode: without
/// `fixed`, their sum all-reduced as above; in deterministic mode (`fixed` given) ordered_global_loss() and
/// the step's retries.
StepStats data_parallel_step_stats(std::int64_t step, coll::Communicator& scalars, const workloads::BatchPlan& plan,
                                   std::span<const double> losses, const FixedPointGrads* fixed,
                                   const OptimizerStepResult& r, std::int64_t tokens, double compute_seconds,
                                   double optimizer_seconds, double seconds);

/// Deterministic mode: the global loss as `none` forms it, 0 + l_0 + l_1 + ... + l_{M−1} in fp64 over the
/// micro-batches j of the step in global order, from every rank's losses in its local order (`mine`, one per
/// micro-batch plan.micro_batches_of(rank) lists), all-gathered over `scalars` (the data-parallel world).
double ordered_global_loss(coll::Communicator& scalars, const workloads::BatchPlan& plan, std::span<const double> mine);

/// Deterministic mode: the verdict on a step's attempt: this rank's tally combined by a MAX all-reduce
/// (fp64) over `group` (every rank that converted micro-batch gradients), then FixedPointGrads::conclude().
bool conclude_fixed_point_attempt(FixedPointGrads& fixed, coll::Communicator& group);

}  // namespace hzp::schedulers
