// What a model's activations cost on one rank, unit by unit, for one micro-batch: the bytes a unit's forward
// leaves held until its backward, and the most each pass holds at once beyond what was held before it. The plan
// (hzpbench plan) walks a schedule's actions over these to estimate the activation memory of a layout it never
// allocates, such as the paper's 36B layouts at 256 ranks. Counted as the allocator's `activation` tag counts
// requested bytes; kernel scratch (tag workspace) and ring-attention buffers (workspace, comm) are not in it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hzp::workloads {

struct UnitActivationBytes {
  /// Allocated by the unit's forward and held until its backward, the unit's output included (its input is the
  /// previous unit's output, or the pipeline stage's received input, and is counted there).
  std::uint64_t kept = 0;
  /// The most the forward holds at once above the level before it (>= kept: transients included).
  std::uint64_t forward_peak = 0;
  /// The most the backward holds at once above the level before it (recompute's rebuilt tensors included); the
  /// backward returns `kept` (its output's gradient takes the output's place, its input's gradient the input's).
  std::uint64_t backward_peak = 0;
};

/// A running count of allocations and frees in the order a pass makes them, keeping the highest level reached:
/// how a model writes down the transients of one unit's forward or backward.
class ActivationLedger {
 public:
  void alloc(std::uint64_t bytes) noexcept {
    level_ += static_cast<std::int64_t>(bytes);
    peak_ = std::max(peak_, level_);
  }
  void free(std::uint64_t bytes) noexcept { level_ -= static_cast<std::int64_t>(bytes); }
  std::int64_t level() const noexcept { return level_; }
  std::uint64_t peak() const noexcept { return static_cast<std::uint64_t>(std::max<std::int64_t>(peak_, 0)); }

 private:
  std::int64_t level_ = 0, peak_ = 0;
};

}  // namespace hzp::workloads
