// Document packing in hzpbench simulate (packing_imbalance.hpp, step_simulator.hpp's simulate_joined), on fixed unit
// times and links, never on a duration measured here: the attention factors are a direct count of the visible pairs
// of the rank's rows; one document per sequence gives factors of exactly 1 and the joined simulation of symmetric
// ranks equals the unpacked simulation (simulate_world, on the node's shared interface where it has one) bit for bit;
// a rank slower on one micro-batch makes its
// peers wait exactly the difference at the next collective over them (a join wait in their exposed communication),
// on the compute thread and on the gradients stream alike.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "hzp/harness/packing_imbalance.hpp"
#include "hzp/harness/step_fold.hpp"
#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "hzp/workloads/context_shard.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/presets.hpp"
#include "simulated_step_checks.hpp"

namespace hzp::harness {
namespace {

using schedulers::StepDescription;

workloads::DocumentPacking documents(double mean, double sigma) {
  workloads::DocumentPacking p;
  p.kind = workloads::PackingKind::documents;
  p.mean_tokens = mean;
  p.sigma = sigma;
  p.seed = 7;
  return p;
}

// The rank's rows follow the mesh a run builds: asynchzp cp2 at W = 4 (z1 = 4) nests cp inside the data-parallel
// shard, so rank r holds context position r mod 2 of data-parallel rank r / 2; zero3's data-parallel rank is r.
TEST(PackingImbalance, RankRowsFollowTheMesh) {
  schedulers::SchedulerOptions o;
  o.cp = 2;
  o.z1 = 4;
  o.z2 = o.z3 = 2;
  for (int r = 0; r < 4; ++r) {
    const RankRows a = rank_rows("asynchzp", o, 4, 2, r);
    EXPECT_EQ(a.dp, 2);
    EXPECT_EQ(a.cp, 2);
    EXPECT_EQ(a.dp_rank, r / 2) << r;
    EXPECT_EQ(a.cp_rank, r % 2) << r;
    const RankRows z = rank_rows("zero3", {}, 4, 2, r);
    EXPECT_EQ(z.dp, 4);
    EXPECT_EQ(z.dp_rank, r);
    EXPECT_EQ(z.cp, 1);
  }
}

// Each factor is the visible pairs inside documents of the rank's rows over those of one document, counted here
// position by position from the documents' first positions.
TEST(PackingImbalance, FactorsAreADirectCount) {
  const workloads::DocumentPacking p = documents(20, 1.0);
  const std::int64_t T = 64, G = 16, M = 2;
  for (const int cp : {1, 2}) {
    for (int dp_rank = 0; dp_rank < 2; ++dp_rank)
      for (int cp_rank = 0; cp_rank < cp; ++cp_rank) {
        const RankRows rows{2, dp_rank, cp, cp_rank};
        const std::vector<double> f = attention_factors(p, G, M, T, rows, 1);
        const workloads::BatchPlan plan(G, M, 2);
        const std::vector<std::int64_t> mine = plan.micro_batches_of(dp_rank);
        ASSERT_EQ(f.size(), mine.size());
        const workloads::ContextShard shard(T, cp, cp_rank);
        for (std::size_t i = 0; i < mine.size(); ++i) {
          double packed = 0, whole = 0;
          bool cut = false;
          for (std::int64_t b = 0; b < M; ++b) {
            const std::vector<std::int32_t> starts = p.starts(plan.first_sample(1, mine[i]) + b, T);
            cut = cut || starts.size() > 1;
            std::vector<std::int32_t> first(static_cast<std::size_t>(T));
            workloads::document_first_positions(starts, T, first);
            for (std::int64_t k = 0; k < (cp > 1 ? shard.local_len() : T); ++k) {
              const std::int64_t t = cp > 1 ? shard.position(k) : k;
              packed += static_cast<double>(t - first[static_cast<std::size_t>(t)] + 1);
              whole += static_cast<double>(t + 1);
            }
          }
          EXPECT_DOUBLE_EQ(f[i], packed / whole) << "cp " << cp << " dp rank " << dp_rank << " micro-batch " << i;
          EXPECT_TRUE(cut);  // 20-token documents in 64 positions: the count is not the trivial one
          EXPECT_LT(f[i], 1.0);
        }
      }
  }
}

// Documents of a fixed length far beyond the sequence (σ = 0): every sequence is one document, every factor 1.
TEST(PackingImbalance, OneDocumentPerSequenceIsFactorOne) {
  const workloads::DocumentPacking p = documents(1e12, 0.0);
  for (const int cp : {1, 2})
    for (int r = 0; r < 2; ++r)
      for (const double f : attention_factors(p, 8, 1, 64, RankRows{2, r, cp, cp - 1}, 0)) EXPECT_EQ(f, 1.0);
}

struct Model {
  std::unique_ptr<workloads::ModelSpec> spec;
  std::unique_ptr<workloads::ParamLayout> layout;
  schedulers::PlanInputs in;
};

// tiny at W ranks in nodes of `per_node`, 8 sequences of one micro-batch each.
Model tiny(int world, int rank, const schedulers::SchedulerOptions& o, int per_node = 2) {
  const auto& preset = workloads::model_preset("tiny");
  Model m{workloads::llama_spec(preset.model), std::make_unique<workloads::ParamLayout>(workloads::llama_layout(preset.model)),
          {}};
  m.in.layout = m.layout.get();
  m.in.model = m.spec.get();
  m.in.train = preset.train;
  m.in.train.global_batch = 8;
  m.in.train.micro_batch_size = 1;
  m.in.world_size = world;
  m.in.ranks_per_node = per_node;
  m.in.rank = rank;
  m.in.small_message_bytes = 0;
  m.in.options = o;
  return m;
}

UnitTimes unit_times(int units, double f, double b, double attention) {
  const auto n = static_cast<std::size_t>(units);
  return {std::vector<double>(n, f), std::vector<double>(n, b), std::vector<double>(n, attention), {}, {}};
}


struct Layout {
  const char* scheduler;
  int tp, cp, pp;
  int world = 4, per_node = 2;
  bool nic_per_rank = false;
};

// Every rank of a layout simulated together with document packing of one document per sequence (its factors, all 1,
// from attention_factors) is the unpacked simulation (simulate_world: each rank alone, or its pipeline group, or on a
// node interface its ranks share the pipelines of whole nodes on one interface clock per node) exactly where the
// ranks' shards are equal. The pp2 layouts put a stage on each node (W = 4 in nodes of 2, W = 8 in nodes of 4), so
// the replicas' boundary messages and collectives queue on the node's one clock, in the joined simulation as in the
// unpacked one (NodeInterface::shared where the ranks have stages, as simulate_packed chooses); with a NIC per rank
// (the profiles') nothing queues. Where a sharded engine's pieces are not equal (tiny's units do not divide by 4 and
// the plan's bytes are each rank's own) and the ranks are simulated apart in the unpacked simulation, a larger
// shard's collective ends later and its peers wait for it at the next join: then the compute and the bytes are still
// equal, and the step and exposed time differ by exactly that join wait (under a microsecond here).
TEST(JoinedSimulation, OneDocumentPerSequenceIsTheUnpackedSimulation) {
  const workloads::DocumentPacking p = documents(1e12, 0.0);
  struct Case {
    Layout l;
    bool even;  // every rank's shard equal, or the unpacked simulation joins the ranks too (a shared interface)
  };
  std::vector<Case> cases{{{"ddp", 1, 1, 1}, true},       {{"hsdp", 1, 1, 1}, true},     {{"nd", 2, 1, 1}, true},
                          {{"nd", 1, 2, 1}, true},        {{"nd", 1, 1, 2}, true},       {{"zero3", 1, 1, 1}, false},
                          {{"asynchzp", 1, 1, 1}, false}, {{"asynchzp", 1, 2, 1}, false}, {{"asynchzp", 1, 1, 2}, true},
                          {{"nd", 1, 1, 2, 8, 4}, true},  {{"asynchzp", 1, 1, 2, 8, 4}, true}};
  cases.push_back({{"nd", 1, 1, 2, 4, 2, true}, true});
  cases.push_back({{"asynchzp", 1, 1, 2, 4, 2, true}, false});  // the unpacked simulation's pipelines apart
  for (const auto& [l, even] : cases) {
    schedulers::SchedulerOptions o;
    o.tp = l.tp;
    o.cp = l.cp;
    o.pp = l.pp;
    o.group_size = 2;
    o.z1 = l.world / l.pp;
    o.z2 = o.z3 = 2;
    std::vector<Model> ms;
    std::vector<StepDescription> ds;
    for (int r = 0; r < l.world; ++r) ms.push_back(tiny(l.world, r, o, l.per_node));
    for (Model& m : ms) ds.push_back(schedulers::describe_step(l.scheduler, m.in));
    const std::string name = std::string(l.scheduler) + " tp" + std::to_string(l.tp) + " cp" + std::to_string(l.cp) +
                             " pp" + std::to_string(l.pp) + " at W = " + std::to_string(l.world) + " in nodes of " +
                             std::to_string(l.per_node) + (l.nic_per_rank ? ", a NIC per rank" : "");
    const std::vector<int>* stages = pipeline_members(ds[0]);
    if (stages != nullptr) {  // a stage per node: the replicas of a stage share its node's interface
      for (int m : *stages)
        EXPECT_TRUE(m == 0 || m / l.per_node != 0) << name << ": rank 0's peer stage " << m << " is on its node";
    }
    const int units = ms[0].layout->num_units();
    UnitTimes t = unit_times(units, 0.01, 0.03, 0.4);
    t.attention_share = block_attention_shares(*ms[0].layout, t.attention_share);
    const SimulatorLinks links = test::slow_links(l.per_node, l.nic_per_rank);
    std::vector<SimulatedRank> all;
    for (int r = 0; r < l.world; ++r) {
      const RankRows rows = rank_rows(l.scheduler, o, l.world, l.per_node, r);
      all.push_back({&ds[static_cast<std::size_t>(r)], attention_factors(p, 8, 1, ms[0].spec->seq_len(), rows)});
    }
    const std::vector<SimulatedStep> joined =
        simulate_joined(all, t, links, stages != nullptr ? NodeInterface::shared : NodeInterface::copies);
    const std::vector<SimulatedStep> unpacked =
        simulate_world(l.world, [&](int r) { return ds[static_cast<std::size_t>(r)]; }, t, links, false);
    for (int r = 0; r < l.world; ++r) {
      const SimulatedStep& alone = unpacked[static_cast<std::size_t>(r)];
      const SimulatedStep& j = joined[static_cast<std::size_t>(r)];
      const std::string what = name + " rank " + std::to_string(r);
      if (even) {
        test::expect_same_step(j, alone, what);
        continue;
      }
      EXPECT_EQ(j.compute_s, alone.compute_s) << what;
      EXPECT_EQ(j.bytes, alone.bytes) << what;
      EXPECT_EQ(j.count, alone.count) << what;
      const double waited = j.join_wait_s - alone.join_wait_s;
      EXPECT_GE(waited, 0) << what;
      EXPECT_LT(waited, 1e-6) << what;
      EXPECT_NEAR(j.exposed_comm_s - alone.exposed_comm_s, waited, 1e-12) << what;
      EXPECT_LE(j.step_s - alone.step_s, waited + 1e-12) << what;
    }
  }
}

// Two zero3 ranks, every call blocking on the compute thread: rank 1's micro-batch 0 has twice the attention, so
// each of its units takes share · (f or b) longer; rank 0 waits exactly that at the collective after each, and the
// two ranks end together. The difference is rank 0's join wait and is in its exposed communication.
TEST(JoinedSimulation, ASlowMicroBatchStallsItsPeerByTheDifference) {
  std::vector<Model> ms;
  std::vector<StepDescription> ds;
  for (int r = 0; r < 2; ++r) ms.push_back(tiny(2, r, {}));
  for (Model& m : ms) ds.push_back(schedulers::describe_step("zero3", m.in));
  const int units = ms[0].layout->num_units();
  const double f = 0.25, b = 0.5, share = 0.5;
  const UnitTimes t = unit_times(units, f, b, share);
  const std::vector<double> even(4, 1.0);
  std::vector<double> slow = even;
  slow[0] = 2.0;
  const std::vector<SimulatedStep> base = simulate_joined({{&ds[0], even}, {&ds[1], even}}, t, test::slow_links());
  const std::vector<SimulatedStep> st = simulate_joined({{&ds[0], even}, {&ds[1], slow}}, t, test::slow_links());
  const double extra = units * share * (f + b);  // micro-batch 0's forward and backward of every unit
  EXPECT_NEAR(st[1].compute_s, base[1].compute_s + extra, 1e-12);
  EXPECT_NEAR(st[0].compute_s, base[0].compute_s, 1e-12);
  EXPECT_NEAR(st[0].join_wait_s, extra, 1e-9);
  EXPECT_NEAR(st[0].exposed_comm_s, base[0].exposed_comm_s + extra, 1e-9);
  EXPECT_NEAR(st[1].join_wait_s, 0, 1e-12);
  EXPECT_NEAR(st[1].exposed_comm_s, base[1].exposed_comm_s, 1e-9);
  EXPECT_NEAR(st[0].step_s, base[0].step_s + extra, 1e-9);
  EXPECT_NEAR(st[1].step_s, st[0].step_s, 1e-9);
}

// ddp overlaps its buckets on the gradients stream: with free links, rank 1's slow micro-batch holds rank 0's buckets
// on the stream until rank 1 issues them, and rank 0's compute waits for the stream to drain: its step is rank 1's,
// and the whole wait is a join wait in its exposed communication.
TEST(JoinedSimulation, AStreamWaitsForItsLateMember) {
  std::vector<Model> ms;
  std::vector<StepDescription> ds;
  for (int r = 0; r < 2; ++r) {
    ms.push_back(tiny(2, r, {}));
    ms.back().in.options.bucket_mb = 1e-6;  // a bucket per unit
  }
  for (Model& m : ms) ds.push_back(schedulers::describe_step("ddp", m.in));
  for (const schedulers::StepEvent& e : ds[0].events) {
    if (e.call >= 0) {
      ASSERT_EQ(e.stream, schedulers::CommStream::gradients);
    }
  }
  const int units = ms[0].layout->num_units();
  const double f = 0.25, b = 0.5, share = 0.5;
  const UnitTimes t = unit_times(units, f, b, share);
  SimulatorLinks l = test::slow_links();
  l.links.intra = l.links.inter = {0, std::numeric_limits<double>::infinity()};
  std::vector<double> slow(4, 1.0);
  slow[3] = 3.0;
  const std::vector<SimulatedStep> st = simulate_joined({{&ds[0], std::vector<double>(4, 1.0)}, {&ds[1], slow}}, t, l);
  const double compute = 4 * units * (f + b), extra = units * share * (f + b) * 2;
  EXPECT_NEAR(st[0].compute_s, compute, 1e-12);
  EXPECT_NEAR(st[1].compute_s, compute + extra, 1e-12);
  EXPECT_NEAR(st[0].step_s, compute + extra, 1e-12);
  EXPECT_NEAR(st[0].exposed_comm_s, extra, 1e-12);
  EXPECT_NEAR(st[0].join_wait_s, extra, 1e-12);
  EXPECT_NEAR(st[1].exposed_comm_s, 0, 1e-12);
}

}  // namespace
}  // namespace hzp::harness
