// Where the gradients of an expert-parallel model are summed (nd with scheduler.ep > 1; docs/nd-parallel.md "Expert
// parallelism"). The ranks of an ep group hold different experts but are data-parallel ranks for every other weight:
// an expert piece's gradient is summed over the ranks that hold the same experts (the expert-data group, dp · cp / ep
// ranks), every other gradient over the whole data × context group. The engine's buckets run over the expert-data
// group, and reduce_dense() then sums the dense ranges over the ep group: the two sums together are the data ×
// context group's sum (a two-level all-reduce), while the expert ranges never leave their expert-data group.
#pragma once

#include <memory>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/distinct_norm.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// The element ranges of `layout`'s flat buffer that are not pieces of an expert-parallel tensor (shard group
/// "ep"), adjacent ranges merged: what is summed over the ep group.
std::vector<SliceRange> dense_ranges(const workloads::ParamLayout& layout);

class ExpertDataParallel {
 public:
  /// nullptr when groups.dims().ep == 1 (nothing to do). Collective over the world (splits two groups).
  static std::unique_ptr<ExpertDataParallel> make(const ProcessGroups& groups, const workloads::ParamLayout& layout);

  /// The ranks holding the same experts: where the engine's gradient buckets run ("edp").
  coll::Communicator& expert_data() const noexcept { return *edp_; }
  /// Sums `grads` (flat, fp32 or int64) over the ep group on every dense range, in place, blocking: after the
  /// buckets' sum over expert_data(), the dense gradients are the data × context group's sum.
  void reduce_dense(TensorView grads) const;
  /// The norm's group (the ep group × the pipeline stages: ranks whose counted elements are the model once) and this
  /// rank's place in its ep group (whole tensors count on position 0 only, as tensor-parallel ones do).
  coll::Communicator* distinct() const noexcept { return distinct_.get(); }
  /// An uncounted duplicate of the ep group for visit_gathered_state (the pieces gathered whole for dumps and tests).
  coll::Communicator* debug() const noexcept { return debug_.get(); }
  int ep_size() const noexcept { return ep_size_; }
  int ep_rank() const noexcept { return ep_rank_; }

 private:
  ExpertDataParallel() = default;
  std::unique_ptr<coll::Communicator> edp_, dense_, distinct_, debug_;
  std::vector<SliceRange> ranges_;
  int ep_size_ = 1, ep_rank_ = 0;
};

}  // namespace hzp::schedulers
