// Folding hzpbench simulate's ranks into roles (step_fold.hpp): a folded world equals the unfolded one exactly, rank by
// rank (step time, exposed communication, pipeline wait, bytes and durations per op and level), for the data-parallel
// schedulers, nd's tensor, context, pipeline and expert layouts and asynchzp with stages, at 16 ranks in nodes of 4,
// where simulating every rank is cheap; and the fold does fold (fewer ranks simulated than the world, but where the
// pipelines that share a node's interface make up the world), and splits ranks whose descriptions differ. Under
// document packing (every rank its own attention factors, simulated in its join set) the ranks of a role share one
// description (role_descriptions.hpp), and the joined simulation equals the one of every rank's own description to the
// bit, at 16 to 64 ranks.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hzp/harness/packing_imbalance.hpp"
#include "hzp/harness/role_descriptions.hpp"
#include "hzp/harness/step_fold.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/presets.hpp"
#include "simulated_step_checks.hpp"

namespace hzp::harness {
namespace {

using schedulers::StepDescription;

constexpr int kWorld = 16, kPerNode = 4;

struct Case {
  const char* name;
  const char* scheduler;
  const char* preset;
  schedulers::SchedulerOptions options;
};

schedulers::SchedulerOptions opts(auto&& set) {
  schedulers::SchedulerOptions o;
  set(o);
  return o;
}

std::vector<Case> cases() {
  using O = schedulers::SchedulerOptions;
  return {
      {"zero3", "zero3", "tiny", {}},
      {"ddp", "ddp", "tiny", {}},
      {"hsdp 4", "hsdp", "tiny", opts([](O& o) { o.group_size = 4; })},
      {"asynchzp 8-4-2", "asynchzp", "tiny", opts([](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2; })},
      {"asynchzp inline", "asynchzp", "tiny", opts([](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2, o.async = false; })},
      {"asynchzp pp2 cp2", "asynchzp", "tiny", opts([](O& o) { o.z1 = 4, o.z2 = 2, o.z3 = 2, o.pp = 2, o.cp = 2; })},
      {"nd tp2 x dp8", "nd", "tiny", opts([](O& o) { o.tp = 2; })},
      {"nd tp2 cp2 x dp4", "nd", "tiny", opts([](O& o) { o.tp = 2, o.cp = 2; })},
      {"nd pp4 x dp4", "nd", "tiny", opts([](O& o) { o.pp = 4; })},
      {"nd ep2 (tiny-moe)", "nd", "tiny-moe", opts([](O& o) { o.ep = 2; })},
  };
}

struct World {
  std::unique_ptr<workloads::ModelSpec> spec;
  workloads::ParamLayout layout;
  schedulers::PlanInputs in;
  StepDescription describe(const char* scheduler, int rank) const {
    schedulers::PlanInputs r = in;
    r.rank = rank;
    return schedulers::describe_step(scheduler, r);
  }
};

std::unique_ptr<World> world_of(const Case& c, int world = kWorld) {
  const auto& preset = workloads::model_preset(c.preset);
  auto w = std::make_unique<World>(World{workloads::llama_spec(preset.model), workloads::llama_layout(preset.model), {}});
  w->in.layout = &w->layout;
  w->in.model = w->spec.get();
  w->in.train = preset.train;
  w->in.train.global_batch = 2 * world;
  w->in.train.micro_batch_size = 1;
  w->in.world_size = world;
  w->in.ranks_per_node = kPerNode;
  w->in.small_message_bytes = 4096;  // both the ring and the latency-optimal rounds appear
  w->in.options = c.options;
  return w;
}

UnitTimes unit_times(const workloads::ParamLayout& layout) {
  UnitTimes t;
  for (int u = 0; u < layout.num_units(); ++u) {
    t.forward_s.push_back(0.001 * (1 + u % 3));  // unequal units: the stages' work differs
    t.backward_s.push_back(0.002 * (1 + u % 2));
    t.attention_share.push_back(0.3);
    t.expert_share.push_back(0.4);
  }
  return t;
}

SimulatorLinks slow_links(bool nic_per_rank) {
  SimulatorLinks l;
  l.links.enabled = true;
  l.links.intra = {5, 2};
  l.links.inter = {20, 0.2};  // communication matters: exposed and waiting times are far from zero
  l.ranks_per_node = kPerNode;
  l.small_message_bytes = 4096;
  l.nic_per_rank = nic_per_rank;
  return l;
}

// Folded and unfolded, every rank's step is the same to the bit; and the fold simulated fewer ranks than the world.
TEST(StepFold, FoldedWorldEqualsEveryRankSimulated) {
  for (const Case& c : cases())
    for (bool nic : {false, true}) {
      const std::unique_ptr<World> w = world_of(c);
      auto describe = [&](int r) { return w->describe(c.scheduler, r); };
      const UnitTimes t = unit_times(w->layout);
      const SimulatorLinks l = slow_links(nic);
      WorldStats full_stats, fold_stats;
      const std::vector<SimulatedStep> full = simulate_world(kWorld, describe, t, l, false, &full_stats);
      const std::vector<SimulatedStep> fold = simulate_world(kWorld, describe, t, l, true, &fold_stats);
      const std::string name = std::string(c.name) + (nic ? ", a NIC per rank" : ", a NIC per node");
      EXPECT_EQ(full_stats.ranks_simulated, kWorld) << name;
      // With a NIC per node, the pipelines whose stages share nodes are simulated together (NodeInterface::shared):
      // at 16 ranks in nodes of 4 that is the world, one set with nothing to fold.
      if (!nic && c.options.pp > 1)
        EXPECT_EQ(fold_stats.ranks_simulated, kWorld) << name;
      else
        EXPECT_LT(fold_stats.ranks_simulated, kWorld) << name;
      ASSERT_EQ(full.size(), fold.size());
      double exposed = 0;
      for (int r = 0; r < kWorld; ++r) {
        test::expect_same_step(full[static_cast<std::size_t>(r)], fold[static_cast<std::size_t>(r)], name + ", rank " + std::to_string(r));
        exposed += full[static_cast<std::size_t>(r)].exposed_comm_s + full[static_cast<std::size_t>(r)].pipeline_wait_s;
      }
      EXPECT_GT(exposed, 0) << name << ": the links are slow enough to show in the step";
    }
}

// A rank whose description differs from its neighbours' (here: more bytes in one call, as a per-rank data difference
// would give) is its own role: the key splits it off, and its result is its own.
TEST(StepFold, ADifferentDescriptionSplitsTheRole) {
  const Case c{"zero3", "zero3", "tiny", {}};
  const std::unique_ptr<World> w = world_of(c);
  const int odd = 5;
  auto describe = [&](int r) {
    StepDescription d = w->describe(c.scheduler, r);
    if (r == odd)
      for (schedulers::StepEvent& e : d.events)
        if (e.collective.op == coll::CollOp::all_gather) {
          e.collective.bytes[0] *= 3;
          e.collective.bytes[1] *= 3;
          break;
        }
    return d;
  };
  const UnitTimes t = unit_times(w->layout);
  const SimulatorLinks l = slow_links(false);
  WorldStats plain_stats, odd_stats;
  auto plain = [&](int r) { return w->describe(c.scheduler, r); };
  const std::vector<SimulatedStep> base = simulate_world(kWorld, plain, t, l, true, &plain_stats);
  const std::vector<SimulatedStep> folded = simulate_world(kWorld, describe, t, l, true, &odd_stats);
  const std::vector<SimulatedStep> full = simulate_world(kWorld, describe, t, l, false);
  EXPECT_EQ(odd_stats.roles, plain_stats.roles + 1);
  EXPECT_NE(folded[odd].bytes, base[odd].bytes);
  for (int r = 0; r < kWorld; ++r) test::expect_same_step(full[static_cast<std::size_t>(r)], folded[static_cast<std::size_t>(r)], "rank " + std::to_string(r));
}

// A group over two nodes, two members on each: from its first member the ring goes on inside the node, from its
// second it leaves the node, so their keys differ; from the other node's first member the pattern is the first's.
TEST(StepFold, KeysSeeTheNodePattern) {
  RoleKeys keys(kPerNode);
  StepDescription a, b;
  schedulers::StepEvent e;
  e.collective.op = coll::CollOp::all_gather;
  e.collective.group = "g";
  e.collective.calls = 1;
  e.collective.elements = 100;
  e.members = {0, 1, 4, 5};  // two nodes, two members each
  a.events.push_back(e);
  a.plan.rank = 0;
  b = a;
  b.plan.rank = 1;  // from rank 1 the ring's next member is on the other node
  StepDescription c = a;
  c.plan.rank = 4;  // from rank 4 the pattern is rank 0's, rotated
  EXPECT_NE(keys.key({&a}), keys.key({&b}));
  EXPECT_EQ(keys.key({&a}), keys.key({&c}));
}

// Document packing: every rank simulated in its join set with its own attention factors (σ = 1 documents of 40
// tokens in tiny's sequences, so the factors differ between ranks), the pipelined layouts on the nodes' shared
// interface clocks. Given its role's description and its own groups
// (RoleDescriptions, the ranks described with a PlanWorld as `simulate` does), every rank's step equals the one from
// its own description (described alone, no world) to the bit; and ranks did share descriptions.
TEST(JoinedSimulation, RolesShareDescriptionsExactly) {
  workloads::DocumentPacking docs;
  docs.kind = workloads::PackingKind::documents;
  docs.mean_tokens = 40;
  docs.sigma = 1.0;
  docs.seed = 3;
  std::vector<std::pair<Case, int>> layouts;
  for (const Case& c : cases()) layouts.emplace_back(c, kWorld);
  for (const int world : {32, 64}) {
    layouts.emplace_back(Case{"zero3", "zero3", "tiny", {}}, world);
    layouts.emplace_back(Case{"asynchzp 8-4-2", "asynchzp", "tiny", opts([](auto& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2; })},
                         world);
    layouts.emplace_back(Case{"nd tp2 pp4", "nd", "tiny", opts([](auto& o) { o.tp = 2, o.pp = 4; })}, world);
  }
  for (const auto& [c, world] : layouts) {
    const std::unique_ptr<World> w = world_of(c, world);
    const std::string name = std::string(c.name) + " at W = " + std::to_string(world);
    const UnitTimes t = unit_times(w->layout);
    const SimulatorLinks l = slow_links(false);
    const std::vector<RankRows> rows = world_rank_rows(c.scheduler, c.options, world, kPerNode);
    std::vector<std::vector<double>> factors;
    for (const RankRows& r : rows)
      factors.push_back(attention_factors(docs, w->in.train.global_batch, 1, w->spec->seq_len(), r));
    std::vector<StepDescription> own;
    std::vector<SimulatedRank> alone;
    for (int r = 0; r < world; ++r) own.push_back(w->describe(c.scheduler, r));
    for (int r = 0; r < world; ++r) alone.push_back({&own[static_cast<std::size_t>(r)], factors[static_cast<std::size_t>(r)]});
    schedulers::PlanWorld plan_world(world, kPerNode);
    schedulers::PlanInputs in = w->in;
    in.world = &plan_world;
    const RoleDescriptions roles(world, [&](int r) {
      schedulers::PlanInputs mine = in;
      mine.rank = r;
      return schedulers::describe_step(c.scheduler, mine);
    }, kPerNode);
    std::vector<SimulatedRank> shared;
    for (int r = 0; r < world; ++r) shared.push_back(roles.rank(r, factors[static_cast<std::size_t>(r)]));
    EXPECT_LT(roles.roles(), world) << name;
    bool uneven = false;
    for (const auto& f : factors) uneven = uneven || f != factors.front();
    EXPECT_TRUE(uneven) << name << ": the ranks' attention differs";
    // Pipelined layouts on the node's shared interface, as simulate_packed runs them: a role's ranks may differ in
    // which of them reserves the node's clock for a group's copy.
    const NodeInterface nodes = pipeline_members(own.front()) != nullptr ? NodeInterface::shared : NodeInterface::copies;
    const std::vector<SimulatedStep> a = simulate_joined(alone, t, l, nodes), b = simulate_joined(shared, t, l, nodes);
    ASSERT_EQ(a.size(), b.size()) << name;
    double waited = 0;
    for (int r = 0; r < world; ++r) {
      test::expect_same_step(a[static_cast<std::size_t>(r)], b[static_cast<std::size_t>(r)], name + ", rank " + std::to_string(r));
      waited += a[static_cast<std::size_t>(r)].join_wait_s;
    }
    EXPECT_GT(waited, 0) << name << ": ranks wait for slower peers";
  }
}

}  // namespace
}  // namespace hzp::harness
