// Folding `hzpbench simulate`'s ranks into roles (docs/simulate.md "Scale"): the key of a set of ranks simulated
// together, equal for two sets exactly when the step model computes the same results for them, and every rank's
// simulated step of a world from one simulation per distinct key.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"

namespace hzp::harness {

/// The fold key of ranks simulated together (pipeline groups in `together` order, or one rank): which of them share
/// a node, and everything simulate_steps reads of their descriptions, with the world ranks of each call's group
/// replaced by what the link model reads of them. That is, per member, its node as a label by first appearance and its place among `together`;
/// the group is rotated to start at the rank itself unless it joins several of `together` (a ring's and the
/// latency-optimal rounds are the same from every position, so only the node pattern seen from the rank counts).
/// Per-rank differences in bytes, calls or compute shares are in the key, so they split the ranks into roles.
class RoleKeys {
 public:
  explicit RoleKeys(int ranks_per_node) : rpn_(ranks_per_node > 0 ? ranks_per_node : 1 << 30) {}
  std::string key(const std::vector<const schedulers::StepDescription*>& together);
  /// Distinct group shapes seen so far (each key names its shapes by their number here).
  std::size_t shapes() const { return shapes_.size(); }

 private:
  int shape(const schedulers::StepEvent& e, int me, const std::vector<int>& together, int& rotation);

  int rpn_;
  std::unordered_map<std::string, int> shapes_;
  std::vector<int> label_;  // shape()'s scratch: a label per node
};

/// How a world's steps were computed: ranks simulated (one per role when folded) and roles found.
struct WorldStats {
  int ranks_simulated = 0, roles = 0;
};

/// Every rank's simulated step of a world of `world` ranks, rank r's description from describe(r). Ranks whose
/// steps wait on each other (the members of the rank's first pipeline call) are simulated together, one rank alone
/// otherwise; on a node interface the node's ranks share (no NIC per rank), the pipelines of every rank on those
/// nodes join them until the nodes are whole, simulated with NodeInterface::shared. With `fold`, a set of ranks whose RoleKeys key equals one already simulated takes its results,
/// position by position, instead of being simulated again; every rank is still described.
std::vector<SimulatedStep> simulate_world(int world, const std::function<schedulers::StepDescription(int)>& describe,
                                          const UnitTimes& t, const SimulatorLinks& links, bool fold,
                                          WorldStats* stats = nullptr);

}  // namespace hzp::harness
