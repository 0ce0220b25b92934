// PlanWorld: what the plans of many ranks of one world share, built once. `hzpbench simulate` describes every rank,
// and each description used to build the world's topology, rank mesh and groups afresh: O(W) per rank, O(W²) in all
// (docs/simulate.md "Scale"). A memo only: each piece comes from the very function an engine calls without one
// (PlanInputs::world = nullptr, as `hzpbench plan` and the tests describe one rank), so the results are the same.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hzp/collectives/mesh.hpp"
#include "hzp/schedulers/group_members.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/process_groups.hpp"

namespace hzp::schedulers {

/// Serves the ranks of one configuration: every PlanInputs it is given differs from the others in `rank` only.
class PlanWorld {
 public:
  PlanWorld(int world_size, int ranks_per_node) : world_size_(world_size), ranks_per_node_(ranks_per_node) {}

  /// The mesh of `dims` over the plan's topology (dims.mesh(plan_topology(in)); no group of it depends on the rank
  /// the topology was made for).
  const coll::RankMesh& mesh(const PlanInputs& in, const ParallelDims& dims);
  /// The group stored under `key`, made by `make` the first time: the key must name everything `make` reads but the
  /// configuration (a group kind and which of its groups).
  GroupMembers group(const std::string& key, const std::function<std::vector<int>()>& make);
  /// The group holding `rank` of the set stored under `key`, made by `make` the first time (a set of disjoint
  /// groups, as ParallelDims::expert_groups); an empty group when none holds it.
  GroupMembers group_holding(const std::string& key, const std::function<coll::RankGroups()>& make, int rank);

 private:
  void check(const PlanInputs& in) const;

  int world_size_, ranks_per_node_;
  std::vector<std::pair<ParallelDims, std::unique_ptr<const coll::RankMesh>>> meshes_;
  std::unordered_map<std::string, GroupMembers> groups_;
  struct GroupSet {
    std::vector<GroupMembers> groups;
    std::vector<int> holding;  // per world rank: its group's index, -1 for none
  };
  std::unordered_map<std::string, GroupSet> sets_;
};

/// The engines' mesh of `dims` for in.rank: in.world's, or built here when there is none.
std::shared_ptr<const coll::RankMesh> plan_mesh(const PlanInputs& in, const ParallelDims& dims);
/// A group of the plan: in.world's under `key` (made by `make` once per world), or make() when there is none.
GroupMembers plan_group(const PlanInputs& in, const std::string& key, const std::function<std::vector<int>()>& make);
/// Every rank of the world, in order (world_plan_group's members): in.world's, or made here when there is none.
GroupMembers plan_world_group(const PlanInputs& in);
/// mesh.group(axes, in.rank) (several axes, or one): in.world's, keyed by the mesh's axes, the group's and its lowest
/// member, or made here when there is none.
GroupMembers plan_mesh_group(const PlanInputs& in, const coll::RankMesh& mesh, std::span<const std::string_view> axes);
GroupMembers plan_mesh_group(const PlanInputs& in, const coll::RankMesh& mesh, std::string_view axis);
/// The group of make()'s set holding in.rank (empty when none does): the set made once per world under `key` (which
/// must name everything `make` reads but the configuration), or here when there is no world.
GroupMembers plan_group_holding(const PlanInputs& in, const std::string& key,
                                const std::function<coll::RankGroups()>& make);

}  // namespace hzp::schedulers
