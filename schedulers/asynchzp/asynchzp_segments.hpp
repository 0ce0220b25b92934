// Segments: what asynchzp shards and launches collectives for. One segment per unit (scheduler.launch =
// unit) or per parameter tensor (launch = tensor, the paper's granularity); the nested layouts of the
// three groups over those segments (l3 ⊃ l2 ⊃ l1, ShardLayout::refine), the layouts of the step-end
// exchanges inside a shard or slice, and the per-segment collectives into or out of a unit's full block.
#pragma once

#include <cstdint>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/gather_scatter.hpp"
#include "hzp/schedulers/common/nested_groups.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

struct Segments {
  /// Segments of `layout` for `launch`, every one padded to a multiple of `pad` (z1, or W for the
  /// reduce-scatter step end, whose pieces are W-th slices).
  Segments(const workloads::ParamLayout& layout, SchedulerOptions::Launch launch, const NestedGroups& g, int pad);

  int first(int unit) const { return unit_first_.at(unit); }
  int end(int unit) const { return unit_first_.at(unit + 1); }
  int unit_of(int seg) const { return seg_unit_.at(seg); }
  /// Offset of the segment in its unit's block (the tensor's offset; 0 per unit).
  std::int64_t offset_in_unit(int seg) const { return seg_offset_.at(seg); }
  /// Elements of a unit's full block: its real elements plus the padding of its last segment.
  std::int64_t unit_block_numel(int unit) const;
  /// Whether segment `seg`'s padded range fits inside its unit's block without covering the next
  /// segment (true for the last segment of a unit and for segments without padding).
  bool in_place(int seg) const;

  /// All-gathers segment `seg` from `shard` into the unit block `block` (param dtype `t`), directly when
  /// in_place, else through a scratch block whose real part is copied; on gs's stream, on its device.
  void gather_segment(GatherScatter& gs, int seg, ConstTensorView shard, std::byte* block, DType t) const;
  /// Reduce-scatters segment `seg` of the unit block into `out` (fp32, or int64 in deterministic mode: the
  /// block holds out.dtype() elements), through a zero-padded scratch copy when not in_place.
  void reduce_scatter_segment(GatherScatter& gs, int seg, const void* block, TensorView out, bool accumulate,
                              CachingAllocator& alloc) const;
  /// A gradient block for `unit` (tag comm) of `t` elements (fp32; int64 in deterministic mode) whose
  /// padding tail is zero.
  Allocation new_grad_block(int unit, CachingAllocator& alloc, DType t = DType::f32,
                            StreamRef s = StreamRef::host()) const;
  /// The padded input of a segment's reduce-scatter, from the unit block of `t` elements (a view when
  /// in_place, else copied into `scratch`, allocated here), on `s`'s device.
  ConstTensorView padded_grad(int seg, const void* block, DType t, Allocation& scratch, CachingAllocator& alloc,
                              StreamRef s = StreamRef::host()) const;

  const workloads::ParamLayout* layout;
  std::vector<int> unit_first_, seg_unit_;
  std::vector<std::int64_t> seg_offset_;
  ShardLayout l3, l2, l1;
  ShardLayout in_shard;       ///< l3 slices cut into z1/z3 optimizer slices (the parameter refresh)
  ShardLayout in_grad_slice;  ///< l2 slices cut into R pieces (reduce-scatter step end)
  ShardLayout in_opt_slice;   ///< l1 slices cut into Q pieces (reduce-scatter step end)
};

}  // namespace hzp::schedulers
