// The scheduler contract (docs/architecture.md, Schedulers): a scheduler owns a training step (where parameters, gradients
// and optimizer states live, and when each collective runs) and talks to the model only through the
// workload interface. Schedulers are registered by name (none, ddp, zero1, zero2, zero3, hsdp, asynchzp;
// scheduler_registry.cpp), so the harness and the parity tests select them from configuration without an
// if-ladder. Each registered scheduler also has a plan (memory and collectives per rank, plan.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/enum_names.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/ring_pool.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/step/pipeline_schedule.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/data_source.hpp"
#include "hzp/workloads/train_config.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::coll {
class Communicator;
class Topology;
}

namespace hzp::schedulers {

class StateArchive;  // state_archive.hpp

/// What one optimizer step reports (the per-step rows of the results file, docs/results-schema.md).
struct StepStats {
  std::int64_t step = 0;        ///< 0-based index of the step just taken
  double loss = 0;              ///< mean loss over every target token of the global batch (fp64)
  double grad_norm = 0;         ///< global L2 norm of the accumulated gradient, before clipping
  double clip_coefficient = 1;  ///< min(1, clip / (norm + 1e-6)); what the update scaled gradients by
  double lr = 0;                ///< learning rate used by this step's update
  std::int64_t tokens = 0;      ///< target tokens of the global batch
  double seconds = 0;           ///< wall time of the whole step
  double compute_seconds = 0;   ///< forward + backward (data loading included)
  double optimizer_seconds = 0; ///< norm, clipping and the AdamW update
  /// Time the compute thread waited on pipeline peers (0 without pipeline parallelism). Reported apart
  /// from compute and collective waits: the harness closes the step time over these parts.
  double pipeline_wait_seconds = 0;
  /// Deterministic mode: times this step was run again because a micro-batch gradient element exceeded
  /// the fixed-point range (docs/deterministic.md); 0 otherwise.
  std::int64_t retries = 0;
  /// The (query, key) position pairs attention visited on this rank this step: document_causal_pairs of the rows it
  /// holds, summed over its micro-batches (workloads::micro_batch_attention_pairs; per position pair, not times heads
  /// or layers). What makes document packing's load imbalance visible (results: ranks/attention_pairs).
  double attention_pairs = 0;
  /// Set by a scheduler whose step runs on a CUDA stream: forward_seconds and backward_seconds (backward
  /// includes recompute) are the device's time, from CUDA events on the compute stream, and the harness
  /// takes compute from them instead of its host phase timers, which on a GPU see only the enqueueing.
  bool device_timed = false;
  double forward_seconds = 0;
  double backward_seconds = 0;
  /// Set with device_timed by the step driver's engines: device_comm_wait_seconds is the time the compute stream
  /// stood waiting for communication in this step, from timed events around each wait (device_stall_clock.hpp),
  /// and the harness takes exposed communication from it instead of the collectives' host-side waits, which on a
  /// GPU are completion times. forward_seconds, backward_seconds and optimizer_seconds then exclude those stalls.
  bool device_comm_timed = false;
  double device_comm_wait_seconds = 0;
  /// Intervals [begin, end] (wall_seconds()) in which the compute thread waited for work of the scheduler's
  /// background communication threads (asynchzp): their collectives are not the compute thread's calls,
  /// so the harness counts these waits as exposed communication, split into join and transfer where they
  /// overlap those collectives' call records.
  std::vector<std::pair<double, double>> background_waits;
};

/// Receives a scheduler's state for `hzpbench run --dump-tensors` (Scheduler::visit_state).
class StateVisitor {
 public:
  virtual ~StateVisitor() = default;
  /// One full tensor: `component` is param (the working parameters), master (bf16-mixed only), grad, m
  /// or v; `name` the parameter's name in the layout; `full` the whole tensor in the component's dtype
  /// and the parameter's shape, valid during the call only.
  virtual void tensor(std::string_view component, std::string_view name, ConstTensorView full) = 0;
};

/// The data of one step: the step index and the source its micro-batches are drawn from (each
/// scheduler takes the micro-batches its rank processes, docs/data.md "Batches").
struct StepBatch {
  std::int64_t step = 0;
  const workloads::DataSource* source = nullptr;
};

/// The `scheduler.*` keys the data-parallel schedulers read (ignored by those that have no use for them).
struct SchedulerOptions {
  double bucket_mb = 25;  ///< ddp: gradient bucket size in MiB (> 0)
  bool overlap = true;    ///< ddp: start bucket all-reduces non-blocking and wait at the end of backward
  int group_size = 0;     ///< hsdp: sharding group size Z (contiguous ranks); 0 = the world (zero3)
  // --- asynchzp (docs/data-parallel.md "asynchzp") ---
  int z1 = 0;  ///< optimizer-state group (fp32 master, m, v); 0 = the world
  int z2 = 0;  ///< gradient group (fp32 reduce-scatter per micro-batch); 0 = z1
  int z3 = 0;  ///< parameter group (all-gather per unit per micro-batch); 0 = z2
  /// How gradient shards are combined across the W/z2 replicas at the end of a step.
  enum class StepEnd { all_reduce, reduce_scatter };
  StepEnd step_end = StepEnd::all_reduce;
  bool async = true;  ///< collectives issued by two background threads (false: inline, the paper's Table 3)
  /// asynchzp with pp > 1: parameter reuse and gradient merging across a stage's neighbouring actions
  /// (step/stage_reuse.hpp).
  bool pp_reuse = true;
  bool rs_merge = true;
  /// asynchzp: the tied table's gradient exchanged in two parts, the dense part (the head's contributions and the
  /// lookup's of all but the last micro-batch) right after the last micro-batch's head backward, and the last
  /// micro-batch's looked-up rows after the embedding's backward (docs/data-parallel.md "The tied table's chain"):
  /// off, or the rows sent to the ranks whose optimizer slices they fall in (all-to-all-v), or all-gathered.
  enum class TiedSplit { off, rows_alltoall, rows_allgather };
  static constexpr EnumName<TiedSplit> kTiedSplitNames[] = {
      {"off", TiedSplit::off},
      {"rows_alltoall", TiedSplit::rows_alltoall},
      {"rows_allgather", TiedSplit::rows_allgather}};
  TiedSplit tied_split = TiedSplit::off;
  int prefetch = 2;   ///< parameter all-gathers issued ahead of use, in units (>= 1; bounded by the pool)
  enum class Launch { unit, tensor };
  Launch launch = Launch::unit;  ///< one collective per unit, or per parameter tensor (the paper's)
  double pool_mb = 0;            ///< communication ring pool in MiB; 0 = sized from prefetch and the units
  enum class PoolFallback { error, inline_alloc };
  PoolFallback pool_fallback = PoolFallback::error;  ///< a block larger than its ring: error, or inline + counted
  // --- nd: classic ND parallelism (docs/nd-parallel.md) ---
  int tp = 1;  ///< tensor-parallel degree (consecutive ranks, inside a node); dp = W / (tp · cp · pp)
  /// Megatron's sequence parallelism inside the tensor-parallel group (the model's TensorParallel option).
  bool sequence_parallel = false;
  /// Megatron's distributed optimizer: gradients reduce-scattered over dp, AdamW on the rank's shard, the
  /// parameters all-gathered; false: full replicas and a bucketed all-reduce, as ddp.
  bool distributed_optimizer = false;
  /// Allow a tensor-parallel group to span virtual nodes (refused otherwise).
  bool tp_across_nodes = false;
  // --- nd: pipeline parallelism (docs/nd-parallel.md "Pipeline") ---
  int pp = 1;  ///< pipeline stages (the outermost mesh axis); dp = W / (tp · cp · pp)
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int virtual_stages = 1;             ///< chunks per stage (interleaved only: >= 2)
  std::vector<int> pp_layers{};       ///< blocks per stage (empty: balanced); pp entries summing to the blocks
  /// Benchmark hook (pipeline stages): a sleep of this many ms after every block's forward and backward, which
  /// dwarfs the compute of a small model, so the pipeline's bubble is measured against a known unit time;
  /// refused by the harness unless HZPBENCH_BENCHMARK_HOOKS=1 (docs/nd-parallel.md).
  double debug_unit_sleep_ms = 0;
  // --- nd: context parallelism (docs/nd-parallel.md "Context parallelism") ---
  /// Ranks every sequence is split over (ring attention); inside pp, outside tp; dp = W / (tp · cp · pp).
  int cp = 1;
  // --- nd: expert parallelism (docs/nd-parallel.md "Expert parallelism") ---
  /// Ranks every MoE block's routed experts are split over (E/ep consecutive experts each); ep consecutive ranks of
  /// the data-parallel group, which stay data-parallel for every other weight; must divide dp = W / (tp · cp · pp).
  int ep = 1;
};

/// Everything a scheduler is built from. The model, allocator and communicator must outlive it.
struct SchedulerArgs {
  const workloads::Workload* model = nullptr;
  workloads::TrainConfig train;
  /// Persistent state (tags param, grad, master, m, v) and activations come from here, so memory per
  /// component is read from its statistics.
  CachingAllocator* allocator = nullptr;
  /// The ranks taking part; nullptr for the single-rank reference.
  coll::Communicator* world = nullptr;
  /// Which node each rank of `world` is on: the scheduler's process groups are laid out on it
  /// (step/process_groups.hpp). nullptr: every rank on one node.
  const coll::Topology* topology = nullptr;
  /// The run's process groups, when the caller built them (the harness does, since a tensor-parallel model
  /// takes its group at construction): their degrees must be the scheduler's (scheduler_parallel_dims). nullptr:
  /// the scheduler splits its own from `world` and `topology`. Must outlive the scheduler.
  const ProcessGroups* groups = nullptr;
  /// The training loop's compute stream: every kernel of the step is enqueued on it. A CUDA stream (with an
  /// allocator over CudaBacking on the same device) puts the whole step on the GPU; only `none` takes one
  /// so far, the others refuse it (the harness refuses backend = cuda for them first).
  StreamRef stream = StreamRef::host();
  SchedulerOptions options;
  /// Deterministic mode's scale policy (train.deterministic); its defaults are the documented ones, tests
  /// change them to force retries.
  FixedPointPolicy fixed_point;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// The registered name.
  virtual std::string_view name() const = 0;
  /// Runs one optimizer step: forward and backward of every micro-batch this rank processes, gradient
  /// reduction, clipping and the update. Steps run in order 0, 1, 2, … (PreconditionError otherwise).
  /// Collective over the scheduler's ranks: every rank calls it with the same batch.
  virtual StepStats step(const StepBatch& batch) = 0;

  /// Hands every parameter's working value, its gradient of the last step and its optimizer states,
  /// full and by name, to `visitor` on the scheduler's rank 0; other ranks' visitors get nothing.
  /// Collective over the scheduler's ranks (a sharded scheduler gathers the pieces first). Call between
  /// steps. The default throws UnsupportedError naming the scheduler.
  virtual void visit_state(StateVisitor& visitor) {
    (void)visitor;
    HZP_THROW(UnsupportedError, "scheduler ", name(), " cannot dump its tensors yet (--dump-tensors)");
  }
  /// Checkpoints (state_archive.hpp, docs/checkpoints.md): saves this rank's share of the training state into
  /// `archive`, or, when archive.loading(), restores it right after construction and before any step, so that the
  /// next step is archive.next_step(). Collective over the scheduler's ranks. The default throws UnsupportedError
  /// naming the scheduler.
  virtual void checkpoint(StateArchive& archive);
  /// The scheduler's communication ring pool, whose occupancy and stalls the harness records; nullptr
  /// when it keeps none.
  virtual RingPool* ring_pool() noexcept { return nullptr; }
};

/// Builds a scheduler; validates its configuration and throws ConfigError naming every value.
using SchedulerFactory = std::function<std::unique_ptr<Scheduler>(const SchedulerArgs&)>;

/// Registered names, in registration order (none first).
std::vector<std::string> scheduler_names();
/// The registered schedulers that run on a CUDA compute stream (device buffers, NCCL groups; docs/cuda.md).
std::vector<std::string> cuda_scheduler_names();
/// The parallel degrees scheduler `name` runs with at `world_size` ranks (step/process_groups.hpp): its process
/// groups are made from them and results files record them. ConfigError for an unknown name, and naming the key
/// of a group size (scheduler.group_size, scheduler.z1, scheduler.tp) that does not divide W.
ParallelDims scheduler_parallel_dims(std::string_view name, const SchedulerOptions& options, int world_size);
/// The scheduler registered as `name`; ConfigError naming it and the registered names.
std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerArgs& args);

}  // namespace hzp::schedulers
