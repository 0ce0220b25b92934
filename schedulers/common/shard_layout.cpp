// ShardLayout (common/shard_layout.hpp): per-segment padding to a multiple of the slice count, and the
// prefix sums that place segments in full and slice buffers.
#include "hzp/schedulers/common/shard_layout.hpp"

#include <utility>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

ShardLayout::ShardLayout(std::vector<std::int64_t> segment_numels, int num_slices, std::int64_t pad_multiple)
    : numel_(std::move(segment_numels)), slices_(num_slices), pad_(pad_multiple == 0 ? num_slices : pad_multiple) {
  HZP_CHECK(slices_ >= 1, "ShardLayout: num_slices = ", slices_, " must be >= 1");
  HZP_CHECK(pad_ >= 1 && pad_ % slices_ == 0, "ShardLayout: pad_multiple = ", pad_,
            " must be a positive multiple of num_slices = ", slices_);
  global_off_.assign(1, 0);
  padded_off_.assign(1, 0);
  slice_off_.assign(1, 0);
  for (std::int64_t n : numel_) {
    HZP_CHECK(n >= 0, "ShardLayout: a segment of ", n, " elements");
    // Rounded up to the pad multiple: every slice then has the same length, which is what all-gather
    // and reduce-scatter need (equal blocks per rank).
    const std::int64_t p = (n + pad_ - 1) / pad_ * pad_;
    padded_.push_back(p);
    global_off_.push_back(global_off_.back() + n);
    padded_off_.push_back(padded_off_.back() + p);
    slice_off_.push_back(slice_off_.back() + p / slices_);
  }
}

ShardLayout ShardLayout::per_unit(const workloads::ParamLayout& layout, int num_slices, std::int64_t pad_multiple) {
  std::vector<std::int64_t> n;
  for (int u = 0; u < layout.num_units(); ++u) n.push_back(layout.unit_numel(u));
  return ShardLayout(std::move(n), num_slices, pad_multiple);
}

ShardLayout ShardLayout::flat(const workloads::ParamLayout& layout, int num_slices, std::int64_t pad_multiple) {
  return ShardLayout({layout.total_numel()}, num_slices, pad_multiple);
}

ShardLayout::Range ShardLayout::valid_range(int seg, int index) const {
  HZP_CHECK(index >= 0 && index < slices_, "ShardLayout: slice index ", index, " outside [0, ", slices_, ")");
  const std::int64_t s = slice_numel(seg);
  const std::int64_t begin = static_cast<std::int64_t>(index) * s;
  const std::int64_t end = std::min(begin + s, numel(seg));
  return {begin, end > begin ? end - begin : 0};
}

std::vector<ShardLayout::FlatSliceRun> ShardLayout::flat_runs(int index) const {
  std::vector<FlatSliceRun> runs;
  for (int seg = 0; seg < num_segments(); ++seg) {
    const Range r = valid_range(seg, index);  // starts where the slice does: its real part comes first
    if (r.count > 0) runs.push_back({global_offset(seg) + r.begin, slice_offset(seg), r.count});
  }
  return runs;
}

ShardLayout ShardLayout::refine(int factor) const {
  HZP_CHECK(factor >= 1, "ShardLayout::refine: factor = ", factor);
  const std::int64_t finer = static_cast<std::int64_t>(slices_) * factor;
  HZP_CHECK(pad_ % finer == 0, "ShardLayout::refine: pad_multiple = ", pad_, " is not a multiple of ", slices_,
            " x ", factor, " = ", finer, " slices; build the coarse layout with pad_multiple = the finest count");
  return ShardLayout(numel_, static_cast<int>(finer), pad_);
}

}  // namespace hzp::schedulers
