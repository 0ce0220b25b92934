// Segments (asynchzp_segments.hpp): asynchzp's segments, nested layouts and per-segment collectives.
#include "asynchzp/asynchzp_segments.hpp"

#include <cstring>

#include "hzp/core/cuda_backing.hpp"

#include "hzp/core/error.hpp"

namespace hzp::schedulers {
namespace {

std::vector<std::int64_t> segment_numels(const workloads::ParamLayout& layout, SchedulerOptions::Launch launch) {
  std::vector<std::int64_t> n;
  for (int u = 0; u < layout.num_units(); ++u) {
    if (launch == SchedulerOptions::Launch::unit || layout.unit(u).tensors.empty())
      n.push_back(layout.unit_numel(u));
    else
      for (const workloads::ParamTensor& t : layout.unit(u).tensors) n.push_back(t.numel());
  }
  return n;
}

std::vector<std::int64_t> slice_numels(const ShardLayout& l) {
  std::vector<std::int64_t> n;
  for (int s = 0; s < l.num_segments(); ++s) n.push_back(l.slice_numel(s));
  return n;
}

// l's slices cut into `parts` when they divide evenly (else a single-slice layout: the exchange is unused).
ShardLayout inner(const ShardLayout& l, int parts) {
  for (int s = 0; s < l.num_segments(); ++s)
    if (l.slice_numel(s) % parts != 0) return ShardLayout(slice_numels(l), 1);
  return ShardLayout(slice_numels(l), parts);
}

}  // namespace

Segments::Segments(const workloads::ParamLayout& lay, SchedulerOptions::Launch launch, const NestedGroups& g, int pad)
    : layout(&lay),
      l3(segment_numels(lay, launch), g.z3(), pad),
      l2(l3.refine(g.z2() / g.z3())),
      l1(l3.refine(g.z1() / g.z3())),
      in_shard(inner(l3, g.z1() / g.z3())),
      in_grad_slice(inner(l2, g.grad_replicas())),
      in_opt_slice(inner(l1, g.opt_replicas())) {
  unit_first_.push_back(0);
  for (int u = 0; u < lay.num_units(); ++u) {
    const bool per_tensor = launch == SchedulerOptions::Launch::tensor && !lay.unit(u).tensors.empty();
    if (per_tensor)
      for (const workloads::ParamTensor& t : lay.unit(u).tensors) {
        seg_unit_.push_back(u);
        seg_offset_.push_back(t.offset);
      }
    else {
      seg_unit_.push_back(u);
      seg_offset_.push_back(0);
    }
    unit_first_.push_back(static_cast<int>(seg_unit_.size()));
  }
}

std::int64_t Segments::unit_block_numel(int unit) const {
  const int last = end(unit) - 1;
  return last < first(unit) ? 0 : offset_in_unit(last) + l3.padded_numel(last);
}

bool Segments::in_place(int seg) const { return seg + 1 == end(unit_of(seg)) || l3.padded_numel(seg) == l3.numel(seg); }

void Segments::gather_segment(GatherScatter& gs, int seg, ConstTensorView shard, std::byte* block, DType t) const {
  std::byte* base = block + offset_in_unit(seg) * std::int64_t(dtype_size(t));
  const StreamRef s = gs.stream();
  if (in_place(seg)) {
    gs.gather_into(seg, shard, TensorView(base, Shape{l3.padded_numel(seg)}, t, s.device()));
    return;
  }
  Allocation scratch = gs.gather(seg, shard);
  copy_bytes(base, s.device(), scratch.data(), s.device(), static_cast<std::size_t>(l3.numel(seg)) * dtype_size(t), s);
  gs.retire(std::move(scratch));
}

ConstTensorView Segments::padded_grad(int seg, const void* block, DType t, Allocation& scratch,
                                      CachingAllocator& alloc, StreamRef s) const {
  const std::size_t e = dtype_size(t);
  const auto* src = static_cast<const std::byte*>(block) + offset_in_unit(seg) * std::int64_t(e);
  if (in_place(seg)) return ConstTensorView(src, Shape{l3.padded_numel(seg)}, t, s.device());
  scratch = alloc.allocate(static_cast<std::size_t>(l3.padded_numel(seg)) * e, AllocationTag::comm);
  zero_bytes(scratch.data(), static_cast<std::size_t>(l3.padded_numel(seg)) * e, s);
  copy_bytes(scratch.data(), s.device(), src, s.device(), static_cast<std::size_t>(l3.numel(seg)) * e, s);
  return ConstTensorView(scratch.data(), Shape{l3.padded_numel(seg)}, t, s.device());
}

void Segments::reduce_scatter_segment(GatherScatter& gs, int seg, const void* block, TensorView out,
                                      bool accumulate, CachingAllocator& alloc) const {
  Allocation scratch;
  gs.reduce_scatter(seg, padded_grad(seg, block, out.dtype(), scratch, alloc, gs.stream()), out, accumulate);
  gs.retire(std::move(scratch));
}

Allocation Segments::new_grad_block(int unit, CachingAllocator& alloc, DType t, StreamRef s) const {
  const std::int64_t n = unit_block_numel(unit), real = layout->unit_numel(unit);
  const std::size_t e = dtype_size(t);
  Allocation b = alloc.allocate(static_cast<std::size_t>(n) * e, AllocationTag::comm);
  // Padding takes part in the reduce-scatter: it must be zero.
  if (n > real) zero_bytes(static_cast<std::byte*>(b.data()) + real * std::int64_t(e), static_cast<std::size_t>(n - real) * e, s);
  return b;
}

}  // namespace hzp::schedulers
