// ExpertShardLayout (common/expert_shard_layout.hpp).
#include "hzp/schedulers/common/expert_shard_layout.hpp"

#include <algorithm>

#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {
namespace {

bool is_expert_piece(const workloads::ParamTensor& t) { return t.shard.sharded() && t.shard.group == "ep"; }

// Each unit's tensors of one part as runs, packed in the unit's order, adjacent ones of a tensor never merged (the
// norm and the dump need a run's tensor); also each unit's packed count.
std::vector<ExpertShardLayout::Run> part_runs(const workloads::ParamLayout& layout, bool expert,
                                              std::vector<std::int64_t>& numels) {
  std::vector<ExpertShardLayout::Run> out;
  numels.assign(static_cast<std::size_t>(layout.num_units()), 0);
  for (int u = 0; u < layout.num_units(); ++u) {
    const workloads::Unit& unit = layout.unit(u);
    for (int t = 0; t < static_cast<int>(unit.tensors.size()); ++t) {
      const workloads::ParamTensor& p = unit.tensors[static_cast<std::size_t>(t)];
      if (is_expert_piece(p) != expert || p.numel() == 0) continue;
      out.push_back({u, t, layout.tensor_offset(u, t), numels[static_cast<std::size_t>(u)], p.numel()});
      numels[static_cast<std::size_t>(u)] += p.numel();
    }
  }
  return out;
}

std::vector<std::int64_t> numels_of(const workloads::ParamLayout& layout, bool expert) {
  std::vector<std::int64_t> n;
  (void)part_runs(layout, expert, n);
  return n;
}

}  // namespace

ExpertShardLayout::ExpertShardLayout(const workloads::ParamLayout& layout, int dense_slices, int expert_slices)
    : dense_(numels_of(layout, false), dense_slices), expert_(numels_of(layout, true), expert_slices) {
  std::vector<std::int64_t> unused;
  dense_runs_ = part_runs(layout, false, unused);
  expert_runs_ = part_runs(layout, true, unused);
}

std::vector<ExpertShardLayout::SliceRun> ExpertShardLayout::slice_runs(int dense_index, int expert_index) const {
  std::vector<SliceRun> out;
  for (const Part p : {Part::dense, Part::expert}) {
    const ShardLayout& s = shards(p);
    const int index = p == Part::dense ? dense_index : expert_index;
    for (const Run& r : runs(p)) {
      // The slice's real elements of segment r.unit, in packed coordinates, intersected with the run.
      const ShardLayout::Range v = s.valid_range(r.unit, index);
      const std::int64_t lo = std::max(r.packed, v.begin), hi = std::min(r.packed + r.count, v.begin + v.count);
      if (hi <= lo) continue;
      out.push_back({p, r.unit, r.tensor, r.flat + (lo - r.packed),
                     part_base(p) + s.slice_offset(r.unit) + lo - std::int64_t(index) * s.slice_numel(r.unit),
                     hi - lo});
    }
  }
  return out;
}

void ExpertShardLayout::pack(Part p, ConstTensorView flat, TensorView padded, StreamRef s) const {
  const ShardLayout& l = shards(p);
  const std::size_t esz = dtype_size(flat.dtype());
  HZP_CHECK(padded.dtype() == flat.dtype() && padded.numel() == l.padded_total(), "ExpertShardLayout::pack: shapes");
  zero_bytes(padded.data(), static_cast<std::size_t>(padded.numel()) * esz, s);
  for (const Run& r : runs(p))
    copy_bytes(static_cast<std::byte*>(padded.data()) + (l.padded_offset(r.unit) + r.packed) * std::int64_t(esz),
               padded.device(), static_cast<const std::byte*>(flat.data()) + r.flat * std::int64_t(esz), flat.device(),
               static_cast<std::size_t>(r.count) * esz, s);
}

void ExpertShardLayout::unpack(Part p, ConstTensorView padded, TensorView flat, StreamRef s) const {
  const ShardLayout& l = shards(p);
  const std::size_t esz = dtype_size(flat.dtype());
  HZP_CHECK(padded.dtype() == flat.dtype() && padded.numel() == l.padded_total(), "ExpertShardLayout::unpack: shapes");
  for (const Run& r : runs(p))
    copy_bytes(static_cast<std::byte*>(flat.data()) + r.flat * std::int64_t(esz), flat.device(),
               static_cast<const std::byte*>(padded.data()) + (l.padded_offset(r.unit) + r.packed) * std::int64_t(esz),
               padded.device(), static_cast<std::size_t>(r.count) * esz, s);
}

}  // namespace hzp::schedulers
