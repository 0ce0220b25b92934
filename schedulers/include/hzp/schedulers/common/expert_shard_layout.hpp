// ExpertShardLayout: the distributed optimizer's two shard layouts of one rank's model when it holds expert pieces
// (nd with scheduler.ep > 1, or an MoE model under tensor parallelism; docs/nd-parallel.md "Expert parallelism").
// Megatron-Core's layout: every dense element is summed and AdamW-sharded over the data × context group, every
// expert-piece element over its expert-data group (the ranks holding the same experts). A unit's dense elements and
// its expert elements, each packed in the unit's order, are the segments of two ShardLayouts; a rank's optimizer
// slice is its dense slice of every unit followed by its expert slice of every unit. Pure arithmetic and copies,
// shared by the engine (nd_expert_optimizer.cpp) and its plan, so both cut the model alike.
#pragma once

#include <cstdint>
#include <vector>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

class ExpertShardLayout {
 public:
  enum class Part { dense = 0, expert = 1 };
  /// Elements [flat, flat + count) of the rank's flat model buffer are elements [packed, packed + count) of the
  /// part's segment `unit`; they belong to tensor `tensor` of that unit.
  struct Run {
    int unit = 0, tensor = 0;
    std::int64_t flat = 0, packed = 0, count = 0;
  };
  /// A piece of this rank's optimizer slice: slice-buffer elements [local, local + count) are the flat buffer's
  /// [flat, flat + count), of tensor `tensor` of unit `unit` in part `part`.
  struct SliceRun {
    Part part = Part::dense;
    int unit = 0, tensor = 0;
    std::int64_t flat = 0, local = 0, count = 0;
  };

  /// An expert piece is a tensor sharded over group "ep"; every other tensor is dense. PreconditionError unless both
  /// slice counts are >= 1.
  ExpertShardLayout(const workloads::ParamLayout& layout, int dense_slices, int expert_slices);

  const ShardLayout& shards(Part p) const noexcept { return p == Part::dense ? dense_ : expert_; }
  /// Where part p's slices start in a rank's optimizer slice buffer (dense first).
  std::int64_t part_base(Part p) const noexcept { return p == Part::dense ? 0 : dense_.slice_total(); }
  /// The optimizer slice's length (padding included).
  std::int64_t slice_total() const noexcept { return dense_.slice_total() + expert_.slice_total(); }
  /// The real elements of this rank's slice (dense slice `dense_index`, expert slice `expert_index`), in slice order;
  /// the rest of the slice is padding.
  std::vector<SliceRun> slice_runs(int dense_index, int expert_index) const;

  /// Part p of the flat buffer `flat` (the rank's model order) copied into `padded` (the part's padded full buffer,
  /// padding zeroed), and back. Same dtype; enqueued on `s`.
  void pack(Part p, ConstTensorView flat, TensorView padded, StreamRef s) const;
  void unpack(Part p, ConstTensorView padded, TensorView flat, StreamRef s) const;

 private:
  const std::vector<Run>& runs(Part p) const noexcept { return p == Part::dense ? dense_runs_ : expert_runs_; }
  std::vector<Run> dense_runs_, expert_runs_;  // in unit order, then packed order
  ShardLayout dense_, expert_;
};

}  // namespace hzp::schedulers
