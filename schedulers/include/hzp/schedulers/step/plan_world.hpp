// PlanWorld: what the plans of many ranks of one world share, built once. `hzpbench simulate` describes every rank,
// and each description used to build the world's topology, rank mesh and groups afresh: O(W) per rank, O(W²) in all
// (docs/simulate.md "Scale"). A memo only: each piece comes from the very function an engine calls without one
// (PlanInputs::world = nullptr, as `hzpbench plan` and the tests describe one rank), so the results are the same.
#pragma once

#include <functional>
#include <memory>
#include <string>
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

 private:
  void check(const PlanInputs& in) const;

  int world_size_, ranks_per_node_;
  std::vector<std::pair<ParallelDims, std::unique_ptr<const coll::RankMesh>>> meshes_;
  std::unordered_map<std::string, GroupMembers> groups_;
};

/// The engines' mesh of `dims` for in.rank: in.world's, or built here when there is none.
std::shared_ptr<const coll::RankMesh> plan_mesh(const PlanInputs& in, const ParallelDims& dims);
/// A group of the plan: in.world's under `key` (made by `make` once per world), or make() when there is none.
GroupMembers plan_group(const PlanInputs& in, const std::string& key, const std::function<std::vector<int>()>& make);

}  // namespace hzp::schedulers
