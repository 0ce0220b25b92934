// ShardLayout: how a list of segments (one per unit, or one for a whole flat buffer) is cut into equal
// slices for a sharding group, each segment padded to a multiple of the slice count. Pure arithmetic,
// shared by every sharded scheduler (zero1/2/3, hsdp, asynchzp). refine() makes the nested layouts of
// hierarchical sharding: optimizer slice ⊂ gradient slice ⊂ parameter shard (docs/data-parallel.md
// "Sharding layout").
#pragma once

#include <cstdint>
#include <vector>

#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// Segment s holds numel(s) real elements, stored padded to padded_numel(s) = a multiple of
/// pad_multiple() (itself a multiple of num_slices()); slice i of segment s is elements
/// [i·slice_numel(s), (i+1)·slice_numel(s)) of the padded segment. A slice may hold only padding (a
/// small unit at many ranks): padding elements are zero in parameters, gradients and optimizer state and
/// stay zero under AdamW. Two buffers use the layout: a *full* buffer (segments end to end, padded) and a
/// *slice* buffer (one rank's slice of every segment, end to end). Immutable; thread-safe to read.
class ShardLayout {
 public:
  /// pad_multiple 0 = num_slices. PreconditionError unless num_slices >= 1, pad_multiple is a positive
  /// multiple of num_slices, and every numel >= 0.
  ShardLayout(std::vector<std::int64_t> segment_numels, int num_slices, std::int64_t pad_multiple = 0);
  /// One segment per unit of `layout`, in unit order (segment s = unit s).
  static ShardLayout per_unit(const workloads::ParamLayout& layout, int num_slices, std::int64_t pad_multiple = 0);
  /// One segment holding the whole flat buffer.
  static ShardLayout flat(const workloads::ParamLayout& layout, int num_slices, std::int64_t pad_multiple = 0);

  int num_segments() const noexcept { return static_cast<int>(numel_.size()); }
  int num_slices() const noexcept { return slices_; }
  std::int64_t pad_multiple() const noexcept { return pad_; }

  std::int64_t numel(int seg) const { return numel_.at(seg); }
  std::int64_t padded_numel(int seg) const { return padded_.at(seg); }
  std::int64_t slice_numel(int seg) const { return padded_.at(seg) / slices_; }
  /// Unpadded offset of the segment (its offset in the model's flat parameter buffer).
  std::int64_t global_offset(int seg) const { return global_off_.at(seg); }
  /// Offset of the segment in a full padded buffer.
  std::int64_t padded_offset(int seg) const { return padded_off_.at(seg); }
  /// Offset of the segment's slice in a slice buffer.
  std::int64_t slice_offset(int seg) const { return slice_off_.at(seg); }
  std::int64_t total_numel() const noexcept { return global_off_.back(); }
  std::int64_t padded_total() const noexcept { return padded_off_.back(); }
  std::int64_t slice_total() const noexcept { return slice_off_.back(); }
  /// Padding elements in a full buffer (padded_total − total_numel), and its bound: < pad_multiple per
  /// segment.
  std::int64_t padding() const noexcept { return padded_total() - total_numel(); }

  /// The real elements of slice `index` of segment `seg`: [begin, begin + count) counted from the
  /// segment's start (count may be 0: a slice of padding only).
  struct Range {
    std::int64_t begin = 0;
    std::int64_t count = 0;
  };
  Range valid_range(int seg, int index) const;

  /// Slice `index`'s real elements as runs of the model's flat, unpadded order (one per segment it has any of),
  /// each with where it starts in a slice buffer: what a checkpoint writes and reads for this slice
  /// (docs/checkpoints.md). Over every index the runs cover [0, total_numel()) exactly once.
  struct FlatSliceRun {
    std::int64_t global = 0;  ///< offset in the flat, unpadded order
    std::int64_t local = 0;   ///< offset in a slice buffer
    std::int64_t count = 0;
  };
  std::vector<FlatSliceRun> flat_runs(int index) const;

  /// The same segments and padding cut into num_slices()·factor slices: slice j of the result lies
  /// inside slice j / factor of this layout. PreconditionError unless pad_multiple() is a multiple of
  /// num_slices()·factor (build the coarsest layout with the finest count as pad_multiple).
  ShardLayout refine(int factor) const;

 private:
  std::vector<std::int64_t> numel_, padded_;
  std::vector<std::int64_t> global_off_, padded_off_, slice_off_;  // prefix sums, size + 1
  int slices_;
  std::int64_t pad_;
};

}  // namespace hzp::schedulers
