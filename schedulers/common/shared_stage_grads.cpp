// SharedStageGrads (common/shared_stage_grads.hpp): the pair of stages holding a shared unit, and the all-reduce.
#include "hzp/schedulers/common/shared_stage_grads.hpp"

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"

namespace hzp::schedulers {

std::vector<int> shared_units(const workloads::ParamLayout& stage) {
  std::vector<int> out;
  for (int u = 0; u < stage.num_units(); ++u)
    if (stage.unit(u).shared && stage.unit_numel(u) > 0) out.push_back(u);
  return out;
}

SharedStageGrads::SharedStageGrads(const ProcessGroups& groups, const workloads::ParamLayout& layout)
    : units_(shared_units(layout)) {
  if (groups.dims().pp == 1) {
    HZP_CHECK(units_.empty(), "shared stage gradients: a model with shared units but no pipeline");
    return;
  }
  // The pipeline axis is the mesh's outermost: rank = stage · (W / pp) + position, so the ranks at one position
  // of the other axes and holding shared units form each group, ordered by stage. Which stages hold one is in every
  // stage's layout (Unit::held_on_stages), so the slot is a pure function of any rank (a phantom world's split_by).
  const int w = groups.world().size(), per_stage = w / groups.dims().pp;
  std::vector<bool> holds(static_cast<std::size_t>(groups.dims().pp), false);
  for (int u = 0; u < layout.num_units(); ++u)
    for (int s : layout.unit(u).held_on_stages) holds.at(static_cast<std::size_t>(s)) = true;
  const int rank = groups.rank();
  HZP_CHECK(units_.empty() != holds[static_cast<std::size_t>(rank / per_stage)], "shared stage gradients: stage ",
            rank / per_stage, (units_.empty() ? " holds no" : " holds"), " shared unit, its layout says otherwise");
  group_ = groups.world().split_by(
      [holds, per_stage](int q) {
        return coll::GroupSlot{holds[static_cast<std::size_t>(q / per_stage)] ? q % per_stage : -1, q / per_stage};
      },
      "embedding");
  HZP_CHECK(units_.empty() || (group_ != nullptr && group_->size() >= 2), "shared stage gradients: rank ", rank,
            " holds shared units but no other stage does");
}

SharedStageGrads::~SharedStageGrads() = default;

void SharedStageGrads::all_reduce(const std::function<TensorView(int unit)>& grad_of, StreamRef stream) const {
  for (int u : units_) group_->all_reduce(grad_of(u), coll::ReduceOp::sum, stream);
}

}  // namespace hzp::schedulers
