// A world's step descriptions held once per role (docs/simulate.md "Scale"): under document packing every rank is
// simulated with its own attention factors, but ranks whose descriptions are equal up to the world ranks their groups
// hold (step_fold.hpp's key of the rank alone) share one description; each rank keeps only its own groups.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"

namespace hzp::harness {

class RoleDescriptions {
 public:
  /// Describes every rank of `world` (describe(r)); `visit(d)` sees each rank's own description before it is dropped.
  /// `ranks_per_node` as the links' (the key reads the groups' node pattern).
  RoleDescriptions(int world, const std::function<schedulers::StepDescription(int)>& describe, int ranks_per_node,
                   const std::function<void(const schedulers::StepDescription&)>& visit = {});

  int world() const { return static_cast<int>(ranks_.size()); }
  int roles() const { return static_cast<int>(roles_.size()); }
  /// Rank r as simulate_joined takes it: its role's description, its own groups and `factors`.
  SimulatedRank rank(int r, std::vector<double> factors) const;

 private:
  struct Role {
    schedulers::StepDescription description;
    RoleGroups groups;
    std::vector<int> first_event;  // per slot: the first event on it
  };
  static std::unique_ptr<Role> make_role(schedulers::StepDescription d);
  // r's own groups in `role`'s slots; false when r's events put two of its groups in one slot of the role's.
  static bool own_groups(const Role& role, const schedulers::StepDescription& d, RankGroups& out);

  std::vector<std::unique_ptr<Role>> roles_;
  std::vector<RankGroups> ranks_;
  std::vector<int> role_of_;  // per rank: its index in roles_
};

}  // namespace hzp::harness
