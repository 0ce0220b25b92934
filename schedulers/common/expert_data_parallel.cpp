// dense_ranges and ExpertDataParallel (common/expert_data_parallel.hpp).
#include "hzp/schedulers/common/expert_data_parallel.hpp"

#include "hzp/collectives/mesh_comm.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"

namespace hzp::schedulers {

std::vector<SliceRange> dense_ranges(const workloads::ParamLayout& layout) {
  std::vector<SliceRange> out;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const workloads::ParamTensor& t : layout.unit(u).tensors) {
      if (t.shard.sharded() && t.shard.group == "ep") continue;
      const std::int64_t at = layout.unit_offset(u) + t.offset;
      if (!out.empty() && out.back().offset + out.back().count == at)
        out.back().count += t.numel();
      else
        out.push_back({at, t.numel()});
    }
  return out;
}

std::unique_ptr<ExpertDataParallel> ExpertDataParallel::make(const ProcessGroups& groups,
                                                             const workloads::ParamLayout& layout) {
  const ParallelDims& dims = groups.dims();
  if (dims.ep <= 1) return nullptr;
  HZP_CHECK(groups.expert() != nullptr, "expert data parallelism: ep = ", dims.ep, " but no ep group was made");
  bool pieces = false;
  for (const workloads::Unit& u : layout.units())
    for (const workloads::ParamTensor& t : u.tensors)
      if (t.shard.sharded() && t.shard.group == "ep") {
        if (t.shard.count != dims.ep || t.shard.index != groups.expert()->rank())
          HZP_THROW(ConfigError, "scheduler.ep = ", dims.ep, " (expert-parallel rank ", groups.expert()->rank(),
                    ") but the model's ", t.name, " is piece ", t.shard.index, " of ", t.shard.count,
                    "; fix: build the model with the run's ep group (ProcessGroups::expert())");
        pieces = true;
      }
  // A pipeline stage may hold no MoE block at all; a whole model without pieces was built without the ep group.
  if (!pieces && dims.pp == 1)
    HZP_THROW(ConfigError, "scheduler.ep = ", dims.ep, " but the model holds no expert-parallel pieces (it was built "
              "without the run's ep group); fix: build the model with ProcessGroups::expert(), or scheduler.ep = 1");
  std::unique_ptr<ExpertDataParallel> e(new ExpertDataParallel());
  // One fixed order on every rank: each split is collective over the world.
  e->edp_ = coll::split_groups(groups.world(), dims.expert_data_groups(groups.mesh()), "edp");
  e->distinct_ = coll::split_groups(groups.world(), dims.expert_distinct_groups(groups.mesh()), "distinct");
  // Its own message space, so the engine's sums never interleave with the model's all-to-alls on the ep group.
  e->dense_ = groups.expert()->duplicate("ep_grads");
  e->debug_ = groups.expert()->duplicate("ep_debug", /*share_counters=*/false);
  e->ranges_ = dense_ranges(layout);
  e->ep_size_ = groups.expert()->size();
  e->ep_rank_ = groups.expert()->rank();
  return e;
}

void ExpertDataParallel::reduce_dense(TensorView grads) const {
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "ep dense grads");
  const std::size_t esz = dtype_size(grads.dtype());
  for (const SliceRange& r : ranges_) {
    HZP_CHECK(r.offset + r.count <= grads.numel(), "ExpertDataParallel: range beyond the gradient buffer");
    dense_->all_reduce(TensorView(static_cast<std::byte*>(grads.data()) + r.offset * static_cast<std::int64_t>(esz),
                                  Shape{r.count}, grads.dtype()),
                       coll::ReduceOp::sum, StreamRef::host());
  }
}

}  // namespace hzp::schedulers
