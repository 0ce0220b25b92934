// Where the gradients of an MoE model split over more than the data-parallel group are summed (nd with
// scheduler.ep > 1, or an MoE model under tensor parallelism; docs/nd-parallel.md "Expert parallelism").
// - Expert parallelism: the ranks of an ep group hold different experts but are data-parallel ranks for every other
//   weight: an expert piece's gradient is summed over the ranks that hold the same experts (the expert-data group,
//   dp · cp / ep ranks), every other gradient over the whole data × context group. The engine's buckets run over the
//   expert-data group, and finish_sums() then sums the dense ranges over the ep group: the two sums together are the
//   data × context group's sum (a two-level all-reduce), while the expert ranges never leave their expert-data group.
// - Tensor parallelism: the router and the routed experts are whole on every rank of a tp group, each rank running
//   them on its share of the token rows (ParamTensor::grad_summed_over "tp"): finish_sums() also sums those ranges
//   over the tp group, once per step (Megatron-Core sums them over its expert-data group, which holds the tp ranks).
#pragma once

#include <memory>
#include <string_view>
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
/// The element ranges of tensors whose gradient is a share to be summed over the tensor-parallel group
/// (ParamTensor::grad_summed_over "tp"), adjacent ranges merged.
std::vector<SliceRange> tp_share_ranges(const workloads::ParamLayout& layout);

/// ConfigError naming scheduler.tp, scheduler.distributed_optimizer and the fix when `layout` holds gradients that
/// are tensor-parallel shares (an MoE model under tp > 1): the distributed optimizer does not sum them over tp yet.
void refuse_tp_shares(const workloads::ParamLayout& layout, int tp, std::string_view scheduler);

class ExpertDataParallel {
 public:
  /// nullptr when groups.dims().ep == 1 and no gradient of `layout` is a tensor-parallel share (nothing to do).
  /// Collective over the world (splits its groups).
  static std::unique_ptr<ExpertDataParallel> make(const ProcessGroups& groups, const workloads::ParamLayout& layout);

  /// The ranks holding the same experts: where the engine's gradient buckets run ("edp"; the data × context group
  /// at ep = 1).
  coll::Communicator& expert_data() const noexcept { return *edp_; }
  /// After the buckets' sum over expert_data(), blocking, in place on `grads` (flat, fp32 or int64): sums the dense
  /// ranges over the ep group (then they are the data × context group's sum), and the tensor-parallel shares over the
  /// tp group.
  void finish_sums(TensorView grads) const;
  /// finish_sums' second half alone: the tensor-parallel shares summed over the tp group (the distributed optimizer,
  /// whose reduce-scatters then sum over data × context and over the expert-data group; nothing without shares).
  void sum_tp_shares(TensorView grads) const;
  /// The norm's group (the ep group × the tensor-parallel pieces × the pipeline stages: ranks whose counted elements
  /// are the model once).
  coll::Communicator* distinct() const noexcept { return distinct_.get(); }
  /// What this rank's norm counts (slice = the flat buffer): expert pieces on the first rank of the tp group,
  /// tensor-parallel pieces on the first rank of the ep group, whole tensors on the first of both.
  std::vector<SliceRange> norm_ranges(const workloads::ParamLayout& layout) const;
  /// Uncounted duplicates of the ep and tp groups for visit_gathered_state (the pieces gathered whole for dumps and
  /// tests); nullptr for a group of one.
  coll::Communicator* debug() const noexcept { return debug_.get(); }
  int ep_size() const noexcept { return ep_size_; }
  int ep_rank() const noexcept { return ep_rank_; }

 private:
  ExpertDataParallel() = default;
  std::unique_ptr<coll::Communicator> edp_, dense_, tp_shares_, distinct_, debug_;
  std::vector<SliceRange> ranges_, shares_;
  int ep_size_ = 1, ep_rank_ = 0, tp_rank_ = 0;
};

}  // namespace hzp::schedulers
