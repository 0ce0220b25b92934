// GatherScatter (common/gather_scatter.hpp): all-gather of parameter slices into full blocks and
// reduce-scatter of fp32 gradients into slices, per segment, over one communicator.
#include "hzp/schedulers/common/gather_scatter.hpp"

#include <cstring>

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/add.hpp"

namespace hzp::schedulers {

GatherScatter::GatherScatter(coll::Communicator& group, const ShardLayout& layout, CachingAllocator& alloc,
                             StreamRef stream)
    : group_(&group), layout_(&layout), alloc_(&alloc), requests_(stream) {
  HZP_CHECK(stream.device() == alloc.device(), "GatherScatter: the stream is on ", to_string(stream.device()),
            " but the allocator on ", to_string(alloc.device()));
  HZP_CHECK(layout.num_slices() == group.size(), "GatherScatter: a layout of ", layout.num_slices(),
            " slices over group \"", group.name(), "\" of ", group.size(), " ranks");
}

Allocation GatherScatter::gather(int seg, ConstTensorView shard) {
  const std::int64_t n = layout_->padded_numel(seg);
  Allocation block = alloc_->allocate(static_cast<std::size_t>(n) * dtype_size(shard.dtype()), AllocationTag::comm);
  gather_into(seg, shard, TensorView(block.data(), Shape{n}, shard.dtype(), alloc_->device()));
  return block;
}

void GatherScatter::gather_into(int seg, ConstTensorView shard, TensorView full) {
  HZP_CHECK(shard.numel() == layout_->slice_numel(seg) && full.numel() == layout_->padded_numel(seg) &&
                shard.dtype() == full.dtype(),
            "GatherScatter::gather of segment ", seg, ": shard ", shard.numel(), " ", dtype_name(shard.dtype()),
            ", full ", full.numel(), " ", dtype_name(full.dtype()), ", layout wants ", layout_->slice_numel(seg),
            " and ", layout_->padded_numel(seg));
  if (full.numel() == 0) return;
  requests_.settle(group_->start_all_gather(shard, full, requests_.stream()));
}

void GatherScatter::reduce_scatter(int seg, ConstTensorView full, TensorView out, bool accumulate) {
  const std::int64_t s = layout_->slice_numel(seg);
  HZP_CHECK(full.numel() == layout_->padded_numel(seg) && out.numel() == s && full.dtype() == out.dtype() &&
                (full.dtype() == DType::f32 || full.dtype() == DType::i64),
            "GatherScatter::reduce_scatter of segment ", seg, ": full ", full.numel(), " ", dtype_name(full.dtype()),
            ", out ", out.numel(), " ", dtype_name(out.dtype()), ", layout wants ", layout_->padded_numel(seg),
            " and ", s, " f32 (or int64: deterministic mode)");
  if (s == 0) return;
  const StreamRef stream = requests_.stream();
  if (!accumulate) {
    requests_.settle(group_->start_reduce_scatter(full, out, coll::ReduceOp::sum, stream));
    return;
  }
  // On a CUDA stream the scratch goes back to the allocator while the add is still queued: safe when every later
  // user of the block is ordered after the add on the same stream (docs/cuda.md, Synchronisation); a background
  // stream's engine holds it in its keeper instead (retire()).
  Allocation scratch = alloc_->allocate(static_cast<std::size_t>(s) * dtype_size(full.dtype()), AllocationTag::comm);
  const TensorView tmp(scratch.data(), Shape{s}, full.dtype(), alloc_->device());
  requests_.settle(group_->start_reduce_scatter(full, tmp, coll::ReduceOp::sum, stream));
  if (full.dtype() == DType::i64)
    add_inplace_i64(out, tmp);
  else
    add_inplace_f32(out, tmp, stream);
  retire(std::move(scratch));
}

void GatherScatter::retire(Allocation scratch) {
  if (keeper_ != nullptr)
    keeper_->keep(std::move(scratch));
  else
    scratch.reset();
}

ConstTensorView GatherScatter::real_part(int seg, const Allocation& block, DType dtype) const {
  return ConstTensorView(block.data(), Shape{layout_->numel(seg)}, dtype, alloc_->device());
}

void add_inplace_f32(TensorView out, ConstTensorView in, StreamRef s) {
  HZP_CHECK(out.numel() == in.numel() && out.dtype() == DType::f32 && in.dtype() == DType::f32,
            "add_inplace_f32: ", out.numel(), " += ", in.numel(), " elements");
  if (s.device().is_cuda()) {  // the element-wise add's CUDA twin: the same single rounding per element
    kernels::add(out, out, in, s);
    return;
  }
  float* o = out.as<float>();
  const float* i = in.as<const float>();
  for (std::int64_t k = 0; k < out.numel(); ++k) o[k] += i[k];
}

void add_inplace_i64(TensorView out, ConstTensorView in) {
  HZP_CHECK(out.numel() == in.numel() && out.dtype() == DType::i64 && in.dtype() == DType::i64,
            "add_inplace_i64: ", out.numel(), " += ", in.numel(), " elements");
  std::int64_t* o = out.as<std::int64_t>();
  const std::int64_t* i = in.as<const std::int64_t>();
  for (std::int64_t k = 0; k < out.numel(); ++k) o[k] += i[k];
}

}  // namespace hzp::schedulers
