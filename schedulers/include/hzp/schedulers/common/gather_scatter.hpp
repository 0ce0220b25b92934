// GatherScatter: the per-segment collectives of sharded data parallelism over one communicator:
// all-gather a segment's parameter slices into a full block (from the caching allocator, tag `comm`,
// freed by the caller after use) or into an existing full buffer, and reduce-scatter a segment's fp32
// gradient into this rank's slice (overwriting or accumulating). zero1/2/3 and hsdp use it over their
// sharding group; asynchzp over its z3, z2 and step-end groups (its background threads over their own
// duplicated communicators).
#pragma once

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"

namespace hzp::schedulers {

/// The slice a rank holds is slice group.rank() of every segment (all-gather and reduce-scatter put
/// block r on rank r), so `layout.num_slices()` must equal group.size(). Blocking calls on the calling
/// thread (the "synchronous" schedulers); not thread-safe (one communicator, one thread). On a CUDA stream
/// (device buffers, a NCCL group) "blocking" means ordered on the stream: the host does not wait, and
/// complete() finishes the step's requests (hzp/collectives/stream_ordered_requests.hpp).
class GatherScatter {
 public:
  /// All three must outlive this object. PreconditionError when the slice count differs from the group.
  /// Collectives and the accumulating add run on `stream` (the allocator's device).
  GatherScatter(coll::Communicator& group, const ShardLayout& layout, CachingAllocator& alloc,
                StreamRef stream = StreamRef::host());

  coll::Communicator& group() const noexcept { return *group_; }
  const ShardLayout& layout() const noexcept { return *layout_; }
  int slice_index() const noexcept { return group_->rank(); }

  /// A full block of segment `seg` (padded_numel elements of shard.dtype(), tag comm) gathered from every
  /// rank's `shard` (slice_numel elements). The caller frees it (reset or destroy) once done with it.
  Allocation gather(int seg, ConstTensorView shard);
  /// The same into an existing full buffer `full` (padded_numel), whose own block may alias `shard`
  /// (in place).
  void gather_into(int seg, ConstTensorView shard, TensorView full);
  /// Sum over ranks of `full` (fp32, padded_numel) reduce-scattered to this rank's slice: written into
  /// `out` (fp32, slice_numel), or added to it when `accumulate` (through a comm-tagged scratch slice).
  /// int64 for both (deterministic mode's fixed-point gradients) sums exactly.
  void reduce_scatter(int seg, ConstTensorView full, TensorView out, bool accumulate);

  /// View of the first numel(seg) elements (the real ones) of a gathered block.
  ConstTensorView real_part(int seg, const Allocation& block, DType dtype) const;
  /// Completes the collectives a CUDA stream has ordered but the host has not waited for (a no-op on the host).
  void complete() { requests_.complete(); }
  /// The stream the collectives and the accumulating add are ordered on.
  StreamRef stream() const noexcept { return requests_.stream(); }
  /// Scratch blocks whose last use is queued on stream() go to `keeper` rather than back to the allocator at
  /// once (a stream other than the allocator's other users': asynchzp's background streams). nullptr: freed.
  void set_scratch_keeper(StreamScratch* keeper) noexcept { keeper_ = keeper; }
  /// Frees a scratch block used by work queued on stream(): through the keeper when one is set.
  void retire(Allocation scratch);

 private:
  coll::Communicator* group_;
  const ShardLayout* layout_;
  CachingAllocator* alloc_;
  coll::StreamOrderedRequests requests_;
  StreamScratch* keeper_ = nullptr;
};

/// out[i] += in[i] over fp32 views of equal length (gradient accumulation of reduced slices), on `s`.
void add_inplace_f32(TensorView out, ConstTensorView in, StreamRef s = StreamRef::host());
/// out[i] += in[i] over int64 views of equal length (fixed-point gradients: exact).
void add_inplace_i64(TensorView out, ConstTensorView in);

}  // namespace hzp::schedulers
