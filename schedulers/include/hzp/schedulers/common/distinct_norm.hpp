// The global gradient norm when the model is split over a tensor-parallel group: each rank's gradient slice
// holds tensor-parallel pieces (different on every rank of the group) and whole tensors (norm gains, and the
// embedding and head when they are not vocabulary-parallel) that every rank of the group holds identically.
// The norm counts every piece, and each whole tensor once (on the group's first rank), then sums over the
// group whose members hold distinct parts of the model (tp × the data-parallel shards × the pipeline stages). A
// pipeline stage's table held for another stage's unit (Unit::runs false: the tied table on the last stage) is
// counted where it runs. Without tensor or pipeline parallelism it is the plain sum over the slice, as before.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// [offset, offset + count) of a slice buffer.
struct SliceRange {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

/// The elements of slice `index` of `shards` (per unit of `layout`) that the norm counts on tensor-parallel rank
/// `tp_rank`: every real element of a sharded tensor (ParamTensor::shard), and on tp_rank 0 every real element
/// of a whole one, in units that run here. Slice coordinates, ascending, adjacent ranges merged.
std::vector<SliceRange> norm_counted_ranges(const workloads::ParamLayout& layout, const ShardLayout& shards, int index,
                                            int tp_rank);
/// The same with the rule given: the real elements of the tensors `counts` accepts (e.g. expert pieces on one rank of
/// the tp group, tensor-parallel pieces on one of the ep group: ExpertDataParallel::norm_ranges).
std::vector<SliceRange> norm_counted_ranges(const workloads::ParamLayout& layout, const ShardLayout& shards, int index,
                                            const std::function<bool(const workloads::ParamTensor&)>& counts);

class DistinctNorm {
 public:
  /// `group`: the ranks whose counted elements together are the model once (nullptr: this rank alone). With
  /// `tp_size` 1 every element of the slice counts.
  DistinctNorm(const workloads::ParamLayout& layout, const ShardLayout& shards, int index, int tp_size, int tp_rank,
               coll::Communicator* group);
  /// The same over ranges the caller has worked out (slice coordinates, e.g. asynchzp's, whose segments may be
  /// tensors rather than units); nullopt: every element of the slice counts.
  DistinctNorm(std::optional<std::vector<SliceRange>> counted, coll::Communicator* group);
  /// Σ g² of the global gradient from this rank's fp32 slice: fp64 sums, or deterministic mode's exact fixed-point
  /// sum when `fixed` is given. Blocking, collective over the group.
  double sum_squares(ConstTensorView slice, const ShardedOptimizer& opt, const FixedPointGrads* fixed) const;

 private:
  bool all_;  // tp_size 1: the whole slice
  std::vector<SliceRange> ranges_;
  coll::Communicator* group_;
};

}  // namespace hzp::schedulers
