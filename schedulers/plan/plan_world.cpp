// PlanWorld and the engines' accessors to it (step/plan_world.hpp).
#include "hzp/schedulers/step/plan_world.hpp"

#include <algorithm>

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

GroupMembers PlanWorld::group_holding(const std::string& key, const std::function<coll::RankGroups()>& make, int rank) {
  auto it = sets_.find(key);
  if (it == sets_.end()) {
    GroupSet set;
    set.holding.assign(static_cast<std::size_t>(world_size_), -1);
    for (std::vector<int>& g : make()) {
      for (int r : g)
        if (r >= 0 && r < world_size_) set.holding[static_cast<std::size_t>(r)] = static_cast<int>(set.groups.size());
      set.groups.emplace_back(std::move(g));
    }
    it = sets_.emplace(key, std::move(set)).first;
  }
  const int i = rank >= 0 && rank < world_size_ ? it->second.holding[static_cast<std::size_t>(rank)] : -1;
  return i < 0 ? GroupMembers() : it->second.groups[static_cast<std::size_t>(i)];
}

std::shared_ptr<const coll::RankMesh> plan_mesh(const PlanInputs& in, const ParallelDims& dims) {
  if (in.world == nullptr) return std::make_shared<const coll::RankMesh>(dims.mesh(plan_topology(in)));
  // Aliasing: the world owns the mesh and outlives the descriptions made with it.
  return {std::shared_ptr<const coll::RankMesh>(), &in.world->mesh(in, dims)};
}

GroupMembers plan_group(const PlanInputs& in, const std::string& key, const std::function<std::vector<int>()>& make) {
  return in.world == nullptr ? GroupMembers(make()) : in.world->group(key, make);
}

namespace {

// The key of mesh's group along `axes` holding `rank`: the mesh's axes, the group's, and its lowest member (the rank's
// coordinates with the group's axes at 0).
std::string mesh_group_key(const coll::RankMesh& mesh, std::span<const std::string_view> axes, int rank) {
  std::vector<int> c = mesh.coord(rank);
  std::string key = "mesh " + coll::format_mesh_axes(mesh.axes()) + " group";
  for (std::string_view a : axes) {
    c[static_cast<std::size_t>(mesh.axis_index(a))] = 0;
    key += " ";
    key += a;
  }
  return key + " from " + std::to_string(mesh.rank_of(c));
}

}  // namespace

GroupMembers plan_mesh_group(const PlanInputs& in, const coll::RankMesh& mesh, std::span<const std::string_view> axes) {
  auto make = [&] { return mesh.group(axes, in.rank); };
  return in.world == nullptr ? GroupMembers(make()) : in.world->group(mesh_group_key(mesh, axes, in.rank), make);
}

GroupMembers plan_mesh_group(const PlanInputs& in, const coll::RankMesh& mesh, std::string_view axis) {
  const std::string_view axes[] = {axis};
  auto make = [&] { return mesh.group(axis, in.rank); };  // one axis: O(its size), where several scan the world
  return in.world == nullptr ? GroupMembers(make()) : in.world->group(mesh_group_key(mesh, axes, in.rank), make);
}

GroupMembers plan_world_group(const PlanInputs& in) {
  return plan_group(in, "world", [&] { return world_plan_group("", in.world_size).members.get(); });
}

GroupMembers plan_group_holding(const PlanInputs& in, const std::string& key,
                                const std::function<coll::RankGroups()>& make) {
  if (in.world != nullptr) return in.world->group_holding(key, make, in.rank);
  for (std::vector<int>& g : make())
    if (std::find(g.begin(), g.end(), in.rank) != g.end()) return GroupMembers(std::move(g));
  return {};
}

}  // namespace hzp::schedulers
