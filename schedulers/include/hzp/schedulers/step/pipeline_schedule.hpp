// Pipeline schedules as action lists (issue 18): how a model's units are cut into pp stages of v chunks each
// (PipelineLayout), and the order one stage runs its chunks' forwards and backwards over a step's micro-batches:
// GPipe (every forward, then every backward: the reference), 1F1B (Megatron's non-interleaved schedule: a warm-up
// of pp − stage − 1 forwards, then one forward and one backward in turn, then the remaining backwards), and
// interleaved 1F1B (Megatron's, v chunks per stage). The step driver runs the lists; an action whose range
// does not start at unit 0 takes its input from the previous stage, one that does not end at the last unit hands
// its output to the next (and the gradients the other way).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/enum_names.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

enum class PipelineScheduleKind { gpipe, one_f_one_b, interleaved };
/// The scheduler.schedule names.
inline constexpr EnumName<PipelineScheduleKind> kPipelineScheduleNames[] = {
    {"gpipe", PipelineScheduleKind::gpipe}, {"1f1b", PipelineScheduleKind::one_f_one_b},
    {"interleaved", PipelineScheduleKind::interleaved}};

/// Its name in kPipelineScheduleNames.
std::string_view to_string(PipelineScheduleKind k);

/// The units cut into pp · v chunks in model order; chunk k runs on stage k mod pp as that stage's chunk k / pp
/// (interleaving: a stage's chunks are pp chunks apart). Chunk k covers units [bounds[k], bounds[k + 1]).
struct PipelineLayout {
  int pp = 1;
  int v = 1;
  std::vector<int> bounds;  ///< pp · v + 1 unit boundaries, from 0 to the unit count

  int chunks() const noexcept { return pp * v; }
  int units() const noexcept { return bounds.empty() ? 0 : bounds.back(); }
  /// The model-order index of stage `stage`'s chunk `c` (0 <= c < v).
  int chunk_of(int stage, int c) const noexcept { return c * pp + stage; }
  int first_unit(int chunk) const { return bounds.at(static_cast<std::size_t>(chunk)); }
  int end_unit(int chunk) const { return bounds.at(static_cast<std::size_t>(chunk) + 1); }
  /// "stage 0: units [0,3) [5,7); stage 1: ..." for messages and run headers.
  std::string describe() const;
  /// The model-order chunk whose units are exactly `a`'s range (PreconditionError naming it when none is).
  int chunk_at(const Action& a) const;
  /// The cut as the model takes it (workloads::stage_layout): every unit's stage, and `stage`.
  workloads::StageCut cut(int stage) const;

  /// The default cut of a model of one end unit on each side (embedding, head) around `units` − 2 blocks: the
  /// blocks split as evenly as possible over the pp · v chunks (the first chunks take one more when they do not
  /// divide), the embedding joining the first chunk and the head the last. ConfigError naming scheduler.pp,
  /// scheduler.virtual_stages and the block count when a chunk would get no block.
  static PipelineLayout balanced(int units, int pp, int v);
  /// A cut with `blocks_per_stage[s]` blocks on stage s (scheduler.pp_layers; v = 1), the ends as above.
  /// ConfigError naming the list and the block count unless it has pp positive entries summing to the blocks.
  static PipelineLayout from_blocks(int units, const std::vector<int>& blocks_per_stage);
};

/// The actions stage `stage` of `layout` runs in one step over `micro_batches` micro-batches, in order.
/// gpipe and 1f1b take v = 1; interleaved takes v >= 2 and micro-batches a multiple of pp (ConfigError naming
/// both otherwise), and runs Megatron's order: forward k (0 <= k < m·v) is micro-batch (k / (pp·v))·pp + k mod pp
/// on chunk (k mod (pp·v)) / pp, backward k the same micro-batch on chunk v − 1 − that; a warm-up of
/// (pp − stage − 1)·2 + (v − 1)·pp forwards (all of them when m = pp), then one forward and one backward in turn,
/// then the rest of the backwards.
std::vector<Action> pipeline_schedule(PipelineScheduleKind kind, const PipelineLayout& layout, int stage,
                                      int micro_batches);

/// The most (micro-batch, chunk) contexts `actions` holds at once (a forward begun, its backward not yet run),
/// divided by the chunks per stage `v` and rounded up: the stage's activations in flight in micro-batches.
int max_in_flight(const std::vector<Action>& actions, int v = 1);

/// PreconditionError unless `actions` is a valid schedule of stage `stage` of `layout`: every micro-batch runs
/// each of the stage's chunks forward once, in chunk order, and backward once after its forward, in reverse
/// chunk order; nothing else.
void check_stage_schedule(const std::vector<Action>& actions, const PipelineLayout& layout, int stage,
                          int micro_batches);

}  // namespace hzp::schedulers
