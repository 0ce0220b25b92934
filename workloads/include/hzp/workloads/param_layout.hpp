// The flat parameter layout of a workload (docs/workloads.md): an ordered list of units, each a contiguous
// block of parameter tensors, laid end to end in one global flat buffer. A tied parameter is stored
// once, in one unit; a unit that reads another unit's parameters names it in `uses`, which tells a
// scheduler which full blocks a call needs and when a gradient is final (after its last writer in
// backward order). Also the counter-based initialisation every shard can run on its own slice.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/tensor.hpp"

namespace hzp::workloads {

/// How an element is initialised. Values depend only on (seed, global flat index): see init_params.
struct ParamInit {
  enum class Kind : std::uint8_t { normal, ones, zeros };
  Kind kind = Kind::normal;
  double std = 0.02;  ///< normal only: value = std · N(0, 1)
};

/// Where a tensor that is one piece of a larger one sits: cut into `count` equal pieces along `dim`, this is
/// piece `index`, and the ranks of process group `group` ("tp", "ep", ...) hold the pieces in group order.
struct ParamShard {
  int dim = -1;  ///< -1: the tensor is whole
  int index = 0;
  int count = 1;
  std::string group;
  bool sharded() const noexcept { return dim >= 0; }
};

/// One parameter tensor inside its unit's block.
struct ParamTensor {
  std::string name;         ///< global name, e.g. "blocks.3.attn.wq" (the same on every shard)
  Shape shape;              ///< this rank's piece, row-major; matrices are [out, in] (y = x·Wᵀ)
  std::int64_t offset = 0;  ///< first element, counted from the start of the unit's block
  ParamInit init;
  /// Sharded tensors: what piece this is, the whole tensor's shape, and where the whole tensor's element 0
  /// sits in the flat numbering of the unsharded model (the index initialisation hashes), so every piece
  /// starts from the values the unsharded model's tensor has. A whole tensor leaves shard and global_shape
  /// unset, and sets global_offset when its own offset differs from the unsharded model's (a layout whose
  /// earlier tensors are pieces).
  ParamShard shard;
  /// A process group ("tp") over which this tensor is replicated but each rank's gradient is only its share (it
  /// ran on the rank's share of the tokens: an MoE router or expert under tensor parallelism): the engine sums the
  /// gradient over that group once per step. Empty: the gradient is whole on this rank (or a piece's own).
  std::string grad_summed_over;
  Shape global_shape;            ///< the whole tensor's shape; empty (ndim 0) = shape
  std::int64_t global_offset = -1;  ///< -1 = this tensor's own flat offset in its layout
  std::int64_t numel() const noexcept { return shape.numel(); }
  const Shape& full_shape() const noexcept { return global_shape.ndim > 0 ? global_shape : shape; }
  /// Row-major index inside the whole tensor of this piece's element `local` (row-major in `shape`).
  std::int64_t index_in_full(std::int64_t local) const;
};

/// One unit: what a scheduler gathers, runs and frees as a whole.
struct Unit {
  std::string name;                 ///< "embedding", "block.0", "head"
  std::vector<ParamTensor> tensors;  ///< in block order, contiguous from offset 0, no padding
  std::int64_t numel = 0;           ///< Σ tensors' numel (the block's length in elements)
  /// Other units whose full parameter blocks forward and backward of this unit read, and whose
  /// gradients backward writes (a tied LM head: uses = {0}, the embedding). Never the unit itself.
  std::vector<int> uses;
  /// false: this layout's model never runs the unit's own calls (a pipeline stage's layout, stage_layout()):
  /// it is absent (no tensors), or held only because a unit that runs here uses it (the tied table on the last
  /// stage). Such a unit writes no gradient here and uses nothing.
  bool runs = true;
  /// A unit two pipeline stages hold (the tied table: the first stage runs it, the last stage's head uses it),
  /// whether or not this stage is one of them: its final gradient is the sum of the two stages' contributions.
  bool shared = false;
  /// A shared unit's holders, in stage order: the stage that runs it and the stages that run a unit using it. Every
  /// stage's layout carries it, so that the group of the holders is a pure function of any rank (docs/phantom.md).
  std::vector<int> held_on_stages;
  /// Tensors and elements the whole model's unit has that this layout leaves out (stage_layout's absent units),
  /// so that per-tensor records and model-wide counts agree on every stage (deterministic mode).
  int absent_tensors = 0;
  std::int64_t absent_numel = 0;
};

/// A pipeline cut as a model sees it: the stage of every unit of the whole model, and the stage this model is.
struct StageCut {
  std::vector<int> stage_of_unit;  ///< empty: no pipeline, the model holds every unit
  int stage = 0;
  bool empty() const noexcept { return stage_of_unit.empty(); }
};

/// The global layout: unit u occupies [unit_offset(u), unit_offset(u) + unit(u).numel) of the flat
/// buffer. No padding between units or tensors (schedulers pad their shards themselves).
/// Immutable after construction; every member is const and thread-safe.
///
/// Order conventions: forward runs units 0, 1, …, U−1; backward runs U−1, …, 0 (the "backward order").
/// Gradient rules a scheduler relies on:
///   - backward(u) writes the gradients of grad_blocks(u) = {u} ∪ uses(u);
///   - the writers of block b, in backward order, are grad_writers(b); the first one overwrites (or
///     accumulates across micro-batches, the scheduler's choice), the later ones must accumulate;
///   - block b's gradient for a micro-batch is final after backward(last_grad_writer(b)).
/// Units that do not run (Unit::runs) are never writers and never last users.
class ParamLayout {
 public:
  ParamLayout() = default;
  /// Checks the units: names non-empty, tensors contiguous from 0 in order with numel summing to the
  /// unit's, uses naming other existing units without duplicates, and each shard a consistent piece of its
  /// global shape (same rank, the cut dimension `count` times this piece's, the others equal, a group name
  /// and a global offset). PreconditionError otherwise.
  explicit ParamLayout(std::vector<Unit> units);

  int num_units() const noexcept { return static_cast<int>(units_.size()); }
  const Unit& unit(int u) const;
  const std::vector<Unit>& units() const noexcept { return units_; }
  std::int64_t unit_offset(int u) const;
  std::int64_t unit_numel(int u) const { return unit(u).numel; }
  /// N: every parameter once (a tied weight counts once).
  std::int64_t total_numel() const noexcept { return total_; }

  /// {u} followed by uses(u): the full blocks a call on u needs present.
  std::vector<int> param_blocks(int u) const;
  /// Same set: the gradient blocks backward(u) writes.
  std::vector<int> grad_blocks(int u) const { return param_blocks(u); }
  /// Units whose backward writes block b's gradient, in backward order (descending unit index).
  std::vector<int> grad_writers(int b) const;
  int first_grad_writer(int b) const { return grad_writers(b).front(); }
  int last_grad_writer(int b) const { return grad_writers(b).back(); }
  /// Blocks whose gradient becomes final (for this micro-batch) when backward(u) returns.
  std::vector<int> grads_final_after(int u) const;
  /// Blocks whose parameters are last read, in forward order, by forward(u) (for freeing after it).
  std::vector<int> params_last_used_in_forward(int u) const;

  /// Where global flat element i lives.
  struct Location {
    int unit = 0;
    int tensor = 0;
    std::int64_t index = 0;  ///< within the tensor
  };
  Location locate(std::int64_t global_index) const;
  /// The tensor called `name` (and its unit), or nullptr.
  const ParamTensor* find(std::string_view name, int* unit_out = nullptr) const;
  /// Global flat offset of tensor t of unit u.
  std::int64_t tensor_offset(int u, int t) const { return unit_offset(u) + unit(u).tensors.at(t).offset; }

 private:
  std::vector<Unit> units_;
  std::vector<std::int64_t> offsets_;  // U + 1 prefix sums
  std::int64_t total_ = 0;
};

/// Writes the initial value of flat elements [global_begin, global_begin + out.size()) of `layout` into out.
/// An element initialised `normal` gets std · z(seed, g), with z a standard normal made by Box–Muller from
/// two uniforms hashed from (seed, g) (SplitMix64 folding, no generator state), where g is the element's
/// index in the flat numbering of the unsharded model: its own flat index for a whole tensor, and
/// global_offset + index_in_full(local) for a piece of a sharded one. The value depends only on the seed and
/// g, so any data-parallel shard initialises its own slice, any tensor-parallel piece its own piece, and
/// every layout starts from the parameters of the unsharded model. `ones`/`zeros` elements get 1/0. The
/// range must lie inside [0, total_numel()). double is the exact value; float rounds it once.
void init_params(const ParamLayout& layout, std::int64_t global_begin, std::span<float> out,
                 std::uint64_t seed);
void init_params(const ParamLayout& layout, std::int64_t global_begin, std::span<double> out,
                 std::uint64_t seed);

/// The layout stage `cut.stage` holds of `full`: the units of that stage keep their tensors and uses; a unit one of
/// them uses that runs on another stage (the tied table on the last stage) keeps its tensors with Unit::runs =
/// false; every other unit keeps only its name and what it leaves out (absent_tensors, absent_numel). A unit used
/// by a unit of another stage is marked shared on every stage. Unit indices are the full model's, and every kept
/// tensor carries its full-model global offset, so init_params gives the stage exactly the full model's values.
/// PreconditionError unless the cut names a stage for every unit and the stage runs at least one.
ParamLayout stage_layout(const ParamLayout& full, const StageCut& cut);

/// A view of unit u's block inside a full flat buffer (1-D [numel], the buffer's dtype and device).
TensorView unit_block(const ParamLayout& layout, int u, TensorView flat);
ConstTensorView unit_block(const ParamLayout& layout, int u, ConstTensorView flat);
/// A view of tensor t (its own shape) inside unit u's block (1-D [unit numel]).
ConstTensorView tensor_in_block(const ParamLayout& layout, int u, int t, ConstTensorView block);
TensorView tensor_in_block(const ParamLayout& layout, int u, int t, TensorView block);

}  // namespace hzp::workloads
