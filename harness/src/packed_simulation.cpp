// Join sets and their simulation under document packing (packed_simulation.hpp).
#include "packed_simulation.hpp"

#include <map>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "hzp/harness/packing_imbalance.hpp"

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
  std::vector<schedulers::StepDescription> ds;
  ds.reserve(static_cast<std::size_t>(world));
  std::vector<int> parent(static_cast<std::size_t>(world));
  std::iota(parent.begin(), parent.end(), 0);
  // Groups whose members are joined already (ranks share a group's vector; the descriptions keep it alive): joining
  // the rank to its first member is enough then.
  std::unordered_set<const std::vector<int>*> joined;
  for (int r = 0; r < world; ++r) {
    ds.push_back(describe(r));
    // Any call over several ranks (a collective, a pipeline or ring message) makes them wait on each other.
    for (const schedulers::StepEvent& e : ds.back().events) {
      if (e.members.empty()) continue;
      if (joined.insert(&e.members.get()).second)
        for (int m : e.members) parent[static_cast<std::size_t>(find(parent, m))] = find(parent, r);
      else
        parent[static_cast<std::size_t>(find(parent, e.members.front()))] = find(parent, r);
    }
  }
  // The factors depend on the rank's rows only (tensor-parallel ranks and stages of one position share them).
  std::map<std::pair<int, int>, std::vector<double>> factors;
  std::map<int, std::vector<SimulatedRank>> sets;
  for (int r = 0; r < world; ++r) {
    const RankRows rows = rank_rows(s.opt.scheduler, options, world, links.ranks_per_node, r);
    auto it = factors.find({rows.dp_rank, rows.cp_rank});
    if (it == factors.end())
      it = factors.emplace(std::pair{rows.dp_rank, rows.cp_rank},
                           attention_factors(s.data.packing, s.train.global_batch, s.train.micro_batch_size,
                                             s.model->seq_len(), rows))
               .first;
    sets[find(parent, r)].push_back({&ds[static_cast<std::size_t>(r)], it->second});
  }
  JoinSets out;
  out.steps.resize(static_cast<std::size_t>(world));
  for (const auto& [root, ranks] : sets) {
    const std::vector<SimulatedStep> steps = simulate_joined(ranks, times, links);
    for (std::size_t i = 0; i < ranks.size(); ++i)
      out.steps[static_cast<std::size_t>(ranks[i].description->plan.rank)] = steps[i];
    ++out.sets;
    out.largest = std::max(out.largest, static_cast<int>(ranks.size()));
  }
  return out;
}

}  // namespace hzp::harness
