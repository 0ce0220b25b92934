// PlanWorld and the engines' accessors to it (step/plan_world.hpp).
#include "hzp/schedulers/step/plan_world.hpp"

#include "hzp/core/error.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"

namespace hzp::schedulers {

void PlanWorld::check(const PlanInputs& in) const {
  HZP_CHECK(in.world_size == world_size_ && in.ranks_per_node == ranks_per_node_, "plan world of ", world_size_,
            " ranks, ", ranks_per_node_, " per node, asked for W = ", in.world_size, ", ", in.ranks_per_node, " per node");
}

const coll::RankMesh& PlanWorld::mesh(const PlanInputs& in, const ParallelDims& dims) {
  check(in);
  for (const auto& [d, m] : meshes_)
    if (d == dims) return *m;
  meshes_.emplace_back(dims, std::make_unique<const coll::RankMesh>(dims.mesh(plan_topology(in))));
  return *meshes_.back().second;
}

GroupMembers PlanWorld::group(const std::string& key, const std::function<std::vector<int>()>& make) {
  auto it = groups_.find(key);
  if (it == groups_.end()) it = groups_.emplace(key, GroupMembers(make())).first;
  return it->second;
}

std::shared_ptr<const coll::RankMesh> plan_mesh(const PlanInputs& in, const ParallelDims& dims) {
  if (in.world == nullptr) return std::make_shared<const coll::RankMesh>(dims.mesh(plan_topology(in)));
  // Aliasing: the world owns the mesh and outlives the descriptions made with it.
  return {std::shared_ptr<const coll::RankMesh>(), &in.world->mesh(in, dims)};
}

GroupMembers plan_group(const PlanInputs& in, const std::string& key, const std::function<std::vector<int>()>& make) {
  return in.world == nullptr ? GroupMembers(make()) : in.world->group(key, make);
}

}  // namespace hzp::schedulers
