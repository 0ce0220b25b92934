// dense_ranges, tp_share_ranges and ExpertDataParallel (common/expert_data_parallel.hpp).
#include "hzp/schedulers/common/expert_data_parallel.hpp"

#include "hzp/collectives/mesh_comm.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"

namespace hzp::schedulers {
namespace {

template <class Keep>
std::vector<SliceRange> ranges_where(const workloads::ParamLayout& layout, Keep keep) {
  std::vector<SliceRange> out;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const workloads::ParamTensor& t : layout.unit(u).tensors) {
      if (!keep(t)) continue;
      const std::int64_t at = layout.unit_offset(u) + t.offset;
      if (!out.empty() && out.back().offset + out.back().count == at)
        out.back().count += t.numel();
      else
        out.push_back({at, t.numel()});
    }
  return out;
}

void all_reduce_ranges(coll::Communicator& c, const std::vector<SliceRange>& ranges, TensorView grads) {
  const std::size_t esz = dtype_size(grads.dtype());
  for (const SliceRange& r : ranges) {
    HZP_CHECK(r.offset + r.count <= grads.numel(), "ExpertDataParallel: range beyond the gradient buffer");
    c.all_reduce(TensorView(static_cast<std::byte*>(grads.data()) + r.offset * static_cast<std::int64_t>(esz),
                            Shape{r.count}, grads.dtype()),
                 coll::ReduceOp::sum, StreamRef::host());
  }
}

}  // namespace

std::vector<SliceRange> dense_ranges(const workloads::ParamLayout& layout) {
  return ranges_where(layout, [](const workloads::ParamTensor& t) { return !(t.shard.sharded() && t.shard.group == "ep"); });
}

std::vector<SliceRange> tp_share_ranges(const workloads::ParamLayout& layout) {
  return ranges_where(layout, [](const workloads::ParamTensor& t) { return t.grad_summed_over == "tp"; });
}

void refuse_tp_shares(const workloads::ParamLayout& layout, int tp, std::string_view scheduler) {
  if (tp <= 1 || tp_share_ranges(layout).empty()) return;
  HZP_THROW(ConfigError, "scheduler ", scheduler, ": an MoE model under scheduler.tp = ", tp, " with "
            "scheduler.distributed_optimizer = true is not implemented (the router's and the experts' gradients are "
            "each tp rank's share of the token rows, which the distributed optimizer's reduce-scatter does not sum "
            "over tp). Fix: scheduler.distributed_optimizer = false, or scheduler.tp = 1");
}

std::unique_ptr<ExpertDataParallel> ExpertDataParallel::make(const ProcessGroups& groups,
                                                             const workloads::ParamLayout& layout) {
  const ParallelDims& dims = groups.dims();
  const bool shares = dims.tp > 1 && !tp_share_ranges(layout).empty();
  if (dims.ep <= 1 && !shares) return nullptr;
  bool pieces = false;
  for (const workloads::Unit& u : layout.units())
    for (const workloads::ParamTensor& t : u.tensors) {
      if (!t.grad_summed_over.empty() && t.grad_summed_over != "tp")
        HZP_THROW(PreconditionError, "the model's ", t.name, " has its gradient summed over group '",
                  t.grad_summed_over, "', which no engine makes");
      if (!(t.shard.sharded() && t.shard.group == "ep")) continue;
      HZP_CHECK(groups.expert() != nullptr, "expert data parallelism: the model's ", t.name, " is an expert piece but "
                "no ep group was made (scheduler.ep = ", dims.ep, ")");
      if (t.shard.count != dims.ep || t.shard.index != groups.expert()->rank())
        HZP_THROW(ConfigError, "scheduler.ep = ", dims.ep, " (expert-parallel rank ", groups.expert()->rank(),
                  ") but the model's ", t.name, " is piece ", t.shard.index, " of ", t.shard.count,
                  "; fix: build the model with the run's ep group (ProcessGroups::expert())");
      pieces = true;
    }
  // A pipeline stage may hold no MoE block at all; a whole model without pieces was built without the ep group.
  if (dims.ep > 1 && !pieces && dims.pp == 1)
    HZP_THROW(ConfigError, "scheduler.ep = ", dims.ep, " but the model holds no expert-parallel pieces (it was built "
              "without the run's ep group); fix: build the model with ProcessGroups::expert(), or scheduler.ep = 1");
  std::unique_ptr<ExpertDataParallel> e(new ExpertDataParallel());
  // One fixed order on every rank: each split is collective over the world.
  e->edp_ = coll::split_groups(groups.world(), dims.expert_data_groups(groups.mesh()), "edp");
  e->distinct_ = coll::split_groups(groups.world(), dims.expert_distinct_groups(groups.mesh()), "distinct");
  if (groups.expert() != nullptr) {
    // Its own message space, so the engine's sums never interleave with the model's all-to-alls on the ep group.
    e->dense_ = groups.expert()->duplicate("ep_grads");
    e->debug_ = groups.expert()->duplicate("ep_debug", /*share_counters=*/false);
    e->ranges_ = dense_ranges(layout);
    e->ep_size_ = groups.expert()->size();
    e->ep_rank_ = groups.expert()->rank();
  }
  if (shares) {
    // Its own name, so the counters keep the step's sums apart from the model's per-micro-batch ones on "tp".
    e->tp_shares_ = groups.tensor()->duplicate("tp_grads");
    e->shares_ = tp_share_ranges(layout);
  }
  e->tp_rank_ = groups.tensor() ? groups.tensor()->rank() : 0;
  return e;
}

void ExpertDataParallel::finish_sums(TensorView grads) const {
  if (dense_) {
    const profile::ScopedPhase phase(profile::Phase::comm_wait, "ep dense grads");
    all_reduce_ranges(*dense_, ranges_, grads);
  }
  sum_tp_shares(grads);
}

void ExpertDataParallel::sum_tp_shares(TensorView grads) const {
  if (!tp_shares_) return;
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "tp expert grads");
  all_reduce_ranges(*tp_shares_, shares_, grads);
}

std::vector<SliceRange> ExpertDataParallel::norm_ranges(const workloads::ParamLayout& layout) const {
  const int ep = ep_rank_, tp = tp_rank_;
  return norm_counted_ranges(layout, ShardLayout::per_unit(layout, 1), 0, [ep, tp](const workloads::ParamTensor& t) {
    const std::string& g = t.shard.sharded() ? t.shard.group : std::string();
    if (g == "ep") return tp == 0;  // replicated over the tp group
    if (g == "tp") return ep == 0;  // replicated over the ep group
    return ep == 0 && tp == 0;
  });
}

}  // namespace hzp::schedulers
