// Join sets and their simulation under document packing (packed_simulation.hpp).
#include "packed_simulation.hpp"

#include <map>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "hzp/harness/packing_imbalance.hpp"
#include "hzp/harness/role_descriptions.hpp"

namespace hzp::harness {
namespace {

int find(std::vector<int>& parent, int r) {
  while (parent[static_cast<std::size_t>(r)] != r) {
    parent[static_cast<std::size_t>(r)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(r)])];
    r = parent[static_cast<std::size_t>(r)];
  }
  return r;
}

}  // namespace

JoinSets simulate_packed(const RunSetup& s, const schedulers::SchedulerOptions& options, int world,
                         const std::function<schedulers::StepDescription(int)>& describe, const UnitTimes& times,
                         const SimulatorLinks& links) {
  std::vector<int> parent(static_cast<std::size_t>(world));
  std::iota(parent.begin(), parent.end(), 0);
  // Groups whose members are joined already (ranks share a group's vector, held here so that its address stays its
  // own once the rank's description is dropped): joining the rank to its first member is enough then.
  std::unordered_set<const std::vector<int>*> joined;
  std::vector<schedulers::GroupMembers> held;
  // A pipelined rank on a node interface its node shares joins its node's ranks too, as simulate_world gathers them:
  // their messages and collectives queue on the node's one clock (NodeInterface::shared).
  const bool shared = node_interface_shared(links);
  std::vector<char> pipelined(static_cast<std::size_t>(world), 0);
  // Every rank is described; each role's description is kept once, with each rank's own groups (role_descriptions.hpp).
  const RoleDescriptions roles(world, describe, links.ranks_per_node, [&](const schedulers::StepDescription& d) {
    const int r = d.plan.rank;
    // Any call over several ranks (a collective, a pipeline or ring message) makes them wait on each other.
    for (const schedulers::StepEvent& e : d.events) {
      if (e.members.empty()) continue;
      if (joined.insert(&e.members.get()).second) {
        held.push_back(e.members);
        for (int m : e.members) parent[static_cast<std::size_t>(find(parent, m))] = find(parent, r);
      } else {
        parent[static_cast<std::size_t>(find(parent, e.members.front()))] = find(parent, r);
      }
    }
    if (shared && pipeline_members(d) != nullptr) {
      pipelined[static_cast<std::size_t>(r)] = 1;
      parent[static_cast<std::size_t>(find(parent, r - r % links.ranks_per_node))] = find(parent, r);
    }
  });
  // The factors depend on the rank's rows only (tensor-parallel ranks and stages of one position share them).
  const std::vector<RankRows> rows = world_rank_rows(s.opt.scheduler, options, world, links.ranks_per_node);
  std::map<std::pair<int, int>, std::vector<double>> factors;
  std::map<int, std::vector<SimulatedRank>> sets;
  std::map<int, std::vector<int>> set_ranks;
  std::map<int, bool> set_pipelined;
  for (int r = 0; r < world; ++r) {
    const RankRows& rr = rows[static_cast<std::size_t>(r)];
    auto it = factors.find({rr.dp_rank, rr.cp_rank});
    if (it == factors.end())
      it = factors.emplace(std::pair{rr.dp_rank, rr.cp_rank},
                           attention_factors(s.data.packing, s.train.global_batch, s.train.micro_batch_size,
                                             s.model->seq_len(), rr))
               .first;
    const int root = find(parent, r);
    sets[root].push_back(roles.rank(r, it->second));
    set_ranks[root].push_back(r);
    set_pipelined[root] = set_pipelined[root] || pipelined[static_cast<std::size_t>(r)] != 0;
  }
  JoinSets out;
  out.roles = roles.roles();
  out.steps.resize(static_cast<std::size_t>(world));
  for (const auto& [root, ranks] : sets) {
    const std::vector<SimulatedStep> steps =
        simulate_joined(ranks, times, links, set_pipelined[root] ? NodeInterface::shared : NodeInterface::copies);
    const std::vector<int>& of = set_ranks[root];
    for (std::size_t i = 0; i < ranks.size(); ++i) out.steps[static_cast<std::size_t>(of[i])] = steps[i];
    ++out.sets;
    out.largest = std::max(out.largest, static_cast<int>(ranks.size()));
  }
  return out;
}

}  // namespace hzp::harness
