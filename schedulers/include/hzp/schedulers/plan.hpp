// The plan of a scheduler (docs/data-parallel.md "The plan"): model-state bytes per rank by component
// and the collectives one step issues, by op, group, link level and bytes, for any configuration and world size, computed
// from the parameter layout alone (nothing allocated, no MPI), so `hzpbench plan` can print the 9B and
// 36B presets at W = 256 on a laptop. Tests check it against what a run records; its formulas are the
// schedulers' own, so tests never use it as the oracle for the schedulers' bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hzp/collectives/types.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/core/interned_text.hpp"
#include "hzp/schedulers/group_members.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/param_layout.hpp"
#include "hzp/workloads/train_config.hpp"

namespace hzp::workloads {
class ModelSpec;
}

namespace hzp::schedulers {

class PlanWorld;

struct PlanInputs {
  const workloads::ParamLayout* layout = nullptr;
  /// The model the layout is of, for plans that depend on more than the unsharded layout (nd: the
  /// tensor-parallel pieces and the model's own collectives); nullptr where the caller has only a layout.
  const workloads::ModelSpec* model = nullptr;
  workloads::TrainConfig train;
  SchedulerOptions options;
  int world_size = 1;
  int ranks_per_node = 0;  ///< 0 = every rank on one node
  int rank = 0;            ///< whose bytes per level (ring hops differ between ranks)
  /// collectives.small_message_bytes: below it the MPI backend uses latency-optimal algorithms, whose
  /// hops (and, for all-reduce, bytes) differ from the ring's.
  std::size_t small_message_bytes = 65536;
  /// Where a caller describing many ranks of this configuration keeps what they share (step/plan_world.hpp);
  /// nullptr: each plan builds its own.
  PlanWorld* world = nullptr;
};

/// One kind of call per step on one group: `calls` calls of `elements_per_call` elements each (as the
/// counters record the count: all_gather the shard, reduce_scatter the full input, all_reduce the buffer).
struct PlannedCollective {
  coll::CollOp op = coll::CollOp::all_gather;
  InternedText group;  ///< the communicator's name: "dp", "shard", "replica", "scalars"
  int group_size = 1;
  DType dtype = DType::f32;
  std::int64_t calls = 0;
  std::int64_t elements = 0;                                 ///< summed over the calls
  std::array<std::uint64_t, coll::kNumLinkLevels> bytes{};  ///< sent by `rank`, per level, summed
  InternedText when;                                         ///< "per micro-batch", "per step"
};

struct SchedulerPlan {
  std::string scheduler;
  int world_size = 1;
  int rank = 0;
  std::int64_t params = 0;            ///< N
  std::int64_t micro_batches_per_rank = 0;
  /// The most micro-batches whose activations the rank holds at once (forward run, backward not yet), over its
  /// schedule's actions (max_in_flight): 1 without pipeline stages, up to pp on 1F1B's first stage, all of them
  /// under GPipe. A pipeline chunk counts as one micro-batch's share of the stage.
  std::int64_t activations_in_flight = 1;
  /// Model-state bytes per rank: param, grad, master, m, v (the allocation tags' requested bytes).
  std::array<std::uint64_t, 5> state_bytes{};
  /// Gathered full parameter blocks held at once at most, beside the model state (asynchzp; allocator tag comm or
  /// its ring pool); 0 when the engine does not estimate it.
  std::uint64_t gathered_peak_bytes = 0;
  /// Activations, estimated from the model's own description of what its units hold (ModelSpec::activation_bytes;
  /// the allocator's activation tag, kernel scratch excluded) over the rank's schedule: one micro-batch's after its
  /// forward, and the peak over the step. 0 when the plan has only a layout (no model).
  std::uint64_t activation_bytes_per_micro_batch = 0;
  std::uint64_t activation_peak_bytes = 0;
  /// Beyond the peak, on a pipeline stage that receives its input: input gradients held until the previous stage
  /// takes them (timing-dependent), at most this many bytes.
  std::uint64_t activation_waiting_bytes = 0;
  std::vector<PlannedCollective> collectives;

  std::uint64_t state_total() const;
  /// A table for `hzpbench plan`.
  std::string to_text() const;
  /// The same as one JSON object (`hzpbench plan --json`): scheduler, world_size, rank, params,
  /// micro_batches_per_rank, activations_in_flight, state_bytes {param, grad, master, m, v, total},
  /// gathered_peak_bytes, activation_bytes {per_micro_batch, peak, waiting_at_most} (estimated), and collectives, each with op,
  /// group, group_size, dtype, calls, elements, bytes {intra, inter} and when.
  std::string to_json() const;
};

inline constexpr std::array<std::string_view, 5> kStateComponents = {"param", "grad", "master", "m", "v"};

/// The plan of scheduler `name` (a registered name); ConfigError as the scheduler's own validation.
SchedulerPlan plan_scheduler(std::string_view name, const PlanInputs& in);

/// Where the engine runs a declared collective (what `hzpbench simulate` needs beyond the plan's totals;
/// docs/simulate.md). `compute`: on the compute thread, which waits for it where it is declared. `params`: on
/// a background stream that issues parameter gathers ahead of use, at most EnginePlan::prefetch gathers beyond
/// the one the compute thread consumes; the compute thread waits for a gather where the unit that declared it
/// runs. `gradients`: started where declared without the compute thread waiting (a background thread's queue,
/// or ddp's non-blocking buckets), drained before the step's end. `pipeline`: the pipeline group's traffic on the
/// compute thread (PipelineStage, StepDriver::run_stage): a receive is waited for before the unit (the peer
/// stage's send of that micro-batch), a send starts without waiting and drains before the step end, and the
/// losses' sum over the stages is where they meet; every wait on it is pipeline wait. `ring`: ring attention's
/// messages inside the unit (RingAttention): each of `rounds` steps posts its share before one of the ring's
/// `blocks` attention blocks (place before_unit, overlapping that block) or sends it after the block (after_unit),
/// and waits for the step's messages before the next block; receives cost the receiver nothing.
enum class CommStream { compute, params, gradients, pipeline, ring };
std::string_view to_string(CommStream s);
/// Whether a unit call's collective is needed before the unit runs (its parameters), follows it (the gradients
/// it made final), runs inside its compute (the model's own tensor-parallel collectives, between its matmuls), or
/// was queued on its stream at the step's start, before any unit (asynchzp's refreshes on the gradient thread, in
/// declaration order): the unit call it is declared at (every gathering call when declared at the step end) gathers
/// only after it completed.
enum class CommPlace { before_unit, after_unit, inside_unit, step_start };

/// One declared call of a step, in the order the engine declares it: where (the unit call of the schedule
/// walk, or the step end), on which stream, the call itself (calls = 1; bytes sent by PlanInputs::rank per
/// level) and its group's members (world ranks, in position order; shared with the group's other calls).
struct StepEvent {
  int call = -1;  ///< index of the unit call in the schedule's walk (for_each_unit_call); -1: the step end
  CommStream stream = CommStream::compute;
  CommPlace place = CommPlace::before_unit;
  PlannedCollective collective;
  GroupMembers members;
  int peer = -1;    ///< send / recv: the peer's position in members
  int rounds = 1;   ///< ring: the steps the calls are spread over, evenly
  int blocks = 0;   ///< ring: the attention blocks the unit's ring computes (its passes' steps)
};

/// A step as the engine and the driver declare it, for one rank: the plan, the schedule the driver runs, every
/// unit call in order (action, unit) and every collective with its place and stream.
struct StepDescription {
  SchedulerPlan plan;
  std::vector<Action> actions;
  std::vector<std::pair<Action, int>> calls;  ///< (action, unit) of each unit call, in the driver's order
  std::vector<StepEvent> events;
  int prefetch = 0;  ///< gathers the params stream may issue beyond the one in use (0: no params stream)
  /// The share of every sequence and of every unit's weights this rank computes: its tensor-parallel degree (each
  /// matmul and attention head split tp ways) and context-parallel degree (1/cp of each sequence's tokens and of
  /// its causal attention pairs).
  int model_tp = 1, model_cp = 1;
};

/// The step description of scheduler `name` for PlanInputs::rank; its events sum to plan_scheduler's collectives.
StepDescription describe_step(std::string_view name, const PlanInputs& in);

}  // namespace hzp::schedulers
