// Roles of a simulated world (step_fold.hpp): the fold key of ranks simulated together, and the loop over a
// world's ranks that simulates one set of ranks per key and hands its results to the others of its role.
#include "hzp/harness/step_fold.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace hzp::harness {
namespace {

using schedulers::StepDescription;
using schedulers::StepEvent;

// A field the key misses would fold ranks the model tells apart: a new field of the description must join the key
// (RoleKeys::key). The sizes are those of this ABI (x86-64, libstdc++).
static_assert(sizeof(StepEvent) == 112, "StepEvent changed: add the new field to RoleKeys::key, then this size");
static_assert(sizeof(StepDescription) == 248, "StepDescription changed: add the new field to RoleKeys::key, then this size");

template <typename T>
void put(std::string& k, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  k.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// What the key holds of one event: every field the simulation reads (labels by their handles: equal texts have
// equal handles, and a key lives in one process), put as one block, since a description has thousands of events.
struct EventKey {
  int shape, peer, call, stream, place, rounds, blocks, op, group_size, dtype;
  std::int64_t calls, elements;
  std::array<std::uint64_t, coll::kNumLinkLevels> bytes;
  std::uintptr_t group, when;
};
static_assert(std::has_unique_object_representations_v<EventKey>, "no padding: the key compares its bytes");

}  // namespace

int RoleKeys::shape(const StepEvent& e, int me, const std::vector<int>& together, int& rotation) {
  const std::vector<int>& m = e.members;
  const int p = static_cast<int>(m.size());
  const int pos = static_cast<int>(std::find(m.begin(), m.end(), me) - m.begin());
  int joined = 0;
  for (int q : m)
    if (std::find(together.begin(), together.end(), q) != together.end()) ++joined;
  // A group joining several ranks of `together` is kept in its own order: who waits for whom depends on positions.
  rotation = joined > 1 || pos >= p ? 0 : pos;
  std::string s;
  s.reserve(static_cast<std::size_t>(p) * 2 * sizeof(int));
  // Node -> label by first appearance from the rotation's start; label_ is -1 but for the nodes seen here, and reset
  // after (a group of thousands of ranks, one per node, is labelled once per rank).
  int labels = 0;
  std::vector<int> seen;
  for (int i = 0; i < p; ++i) {
    const int q = m[static_cast<std::size_t>((i + rotation) % p)];
    const auto node = static_cast<std::size_t>(q / rpn_);
    if (node >= label_.size()) label_.resize(node + 1, -1);
    if (label_[node] < 0) {
      label_[node] = labels++;
      seen.push_back(static_cast<int>(node));
    }
    put(s, label_[node]);
    put(s, static_cast<int>(std::find(together.begin(), together.end(), q) - together.begin()));
  }
  for (int node : seen) label_[static_cast<std::size_t>(node)] = -1;
  put(s, pos < p ? 1 : 0);  // whether the rank is a member at all
  return shapes_.emplace(std::move(s), static_cast<int>(shapes_.size())).first->second;
}

std::string RoleKeys::key(const std::vector<const StepDescription*>& together) {
  std::vector<int> ranks;
  for (const StepDescription* d : together) ranks.push_back(d->plan.rank);
  std::string k;
  // Which of them share a node (its interface, under NodeInterface::shared): each one's node as a label by first
  // appearance.
  std::vector<int> nodes;
  for (int r : ranks) {
    const auto at = std::find(nodes.begin(), nodes.end(), r / rpn_);
    put(k, static_cast<int>(at - nodes.begin()));
    if (at == nodes.end()) nodes.push_back(r / rpn_);
  }
  for (const StepDescription* d : together) {
    put(k, d->prefetch);
    put(k, d->model_tp);
    put(k, d->model_cp);
    put(k, d->calls.size());
    for (const auto& [a, u] : d->calls) {
      put(k, a.kind);
      put(k, a.micro_batch);
      put(k, a.first_unit);
      put(k, a.end_unit);
      put(k, u);
    }
    put(k, d->events.size());
    k.reserve(k.size() + d->events.size() * sizeof(EventKey));
    // A step's events name few distinct groups (a unit's gathers, its reduce-scatters, the exchanges): each group's
    // shape is computed once per description.
    std::vector<std::pair<const schedulers::GroupMembers*, std::pair<int, int>>> seen;  // members -> (shape, rotation)
    for (const StepEvent& e : d->events) {
      auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& x) { return x.first->same(e.members); });
      if (it == seen.end())  // the same ranks in another vector: compared only when no shared one matched
        it = std::find_if(seen.begin(), seen.end(), [&](const auto& x) { return *x.first == e.members; });
      if (it == seen.end()) {
        int rotation = 0;
        const int id = shape(e, d->plan.rank, ranks, rotation);
        it = seen.insert(seen.end(), {&e.members, {id, rotation}});
      }
      const auto [last_shape, last_rotation] = it->second;
      const int p = static_cast<int>(e.members.size());
      const schedulers::PlannedCollective& c = e.collective;
      EventKey x;
      x.shape = last_shape;
      x.peer = e.peer < 0 || p == 0 ? e.peer : (e.peer - last_rotation + p) % p;
      x.call = e.call;
      x.stream = static_cast<int>(e.stream);
      x.place = static_cast<int>(e.place);
      x.rounds = e.rounds;
      x.blocks = e.blocks;
      x.op = static_cast<int>(c.op);
      x.group_size = c.group_size;
      x.dtype = static_cast<int>(c.dtype);
      x.calls = c.calls;
      x.elements = c.elements;
      x.bytes = c.bytes;
      x.group = c.group.id();
      x.when = c.when.id();
      put(k, x);
    }
  }
  return k;
}

std::vector<SimulatedStep> simulate_world(int world, const std::function<StepDescription(int)>& describe,
                                          const UnitTimes& t, const SimulatorLinks& links, bool fold,
                                          WorldStats* stats) {
  std::vector<SimulatedStep> out(static_cast<std::size_t>(world));
  std::vector<bool> simulated(static_cast<std::size_t>(world), false);
  RoleKeys keys(links.ranks_per_node);
  std::unordered_map<std::string, std::vector<SimulatedStep>> roles;
  WorldStats st;
  for (int r0 = 0; r0 < world; ++r0) {
    if (simulated[static_cast<std::size_t>(r0)]) continue;
    // The ranks whose steps wait on each other: rank r0's pipeline group (its pipeline calls' members), run
    // together; one rank alone without stages. On a shared node interface, the pipeline groups of every rank on
    // their nodes too (and theirs, until the nodes are whole): the stages' messages queue there behind the other
    // replicas' (NodeInterface::shared), which is what sets one replica of a stage apart from another.
    std::vector<StepDescription> ds;
    std::vector<int> group{r0};
    const bool shared = node_interface_shared(links);
    for (std::size_t i = 0; i < group.size(); ++i) {
      ds.push_back(describe(group[i]));
      const std::vector<int>* stages = pipeline_members(ds.back());
      if (stages == nullptr) continue;
      std::vector<int> more = *stages;
      if (shared) {
        const int node = group[i] / links.ranks_per_node;
        for (int r = node * links.ranks_per_node; r < std::min(world, (node + 1) * links.ranks_per_node); ++r)
          more.push_back(r);
      }
      for (int r : more)
        if (std::find(group.begin(), group.end(), r) == group.end()) group.push_back(r);
    }
    std::vector<const StepDescription*> ptrs;
    for (const StepDescription& d : ds) ptrs.push_back(&d);
    const NodeInterface nodes = shared ? NodeInterface::shared : NodeInterface::copies;
    const std::vector<SimulatedStep>* steps = nullptr;
    std::vector<SimulatedStep> own;
    if (fold) {
      auto [it, fresh] = roles.try_emplace(keys.key(ptrs));
      if (fresh) {
        it->second = simulate_steps(ptrs, t, links, nodes);
        st.ranks_simulated += static_cast<int>(ptrs.size());
      }
      steps = &it->second;
    } else {
      own = simulate_steps(ptrs, t, links, nodes);
      st.ranks_simulated += static_cast<int>(ptrs.size());
      steps = &own;
    }
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const int r = ds[i].plan.rank;
      simulated[static_cast<std::size_t>(r)] = true;
      out[static_cast<std::size_t>(r)] = (*steps)[i];
    }
  }
  st.roles = fold ? static_cast<int>(roles.size()) : st.ranks_simulated;
  if (stats != nullptr) *stats = st;
  return out;
}

}  // namespace hzp::harness
