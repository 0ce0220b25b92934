// asynchzp's scheduler.tied_split (docs/data-parallel.md "The tied table's chain") under mpiexec at 2 and 4 ranks:
// the tied table's dense part exchanged after the head's backward and the last micro-batch's rows all-gathered
// after the embedding's give the single-rank reference's losses, norms and step-0 gradients (tiny: 128 tokens per
// micro-batch over a vocabulary of 64, so every micro-batch repeats ids) and the option off's within fp32
// tolerance; in deterministic mode two runs and two shardings are bitwise equal; every group but the rows' moves
// the option off's bytes, the rows' all-gather moves the closed form (W−1)·T·(4 + d·b) per rank, and the plan
// the simulator reads declares what ran; pipeline stages, context parallelism and an untied model are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/core/error.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using schedulers::SchedulerOptions;
using workloads::Precision;
using coll::CollOp;

struct SplitCase {
  int z1 = 0, z2 = 0, z3 = 0;
  bool async = true;
  bool rs_end = false;
  std::string label() const {
    return "z1=" + std::to_string(z1) + " z2=" + std::to_string(z2) + " z3=" + std::to_string(z3) +
           (async ? " async" : " inline") + (rs_end ? " step_end=reduce_scatter" : "");
  }
  SchedulerOptions options(bool split) const {
    SchedulerOptions o;
    o.z1 = z1, o.z2 = z2, o.z3 = z3, o.async = async, o.tied_split = split;
    if (rs_end) o.step_end = SchedulerOptions::StepEnd::reduce_scatter;
    return o;
  }
};

// Layouts whose rows cross ranks: optimizer slices over 2 or 4 ranks, with and without replicas, both step ends.
std::vector<SplitCase> cases_at(int w) {
  if (w == 2) return {{2, 2, 2}, {2, 1, 1}, {2, 2, 1, false}, {2, 1, 1, true, true}};
  return {{4, 2, 2}, {4, 4, 4}, {2, 2, 2, false}, {4, 2, 1, true, true}};
}

coll::Topology two_nodes(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), std::max(1, world.size() / 2), world.rank());
}

coll::Topology one_node(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), world.size(), world.rank());
}

struct SplitRun : NdRun {
  SplitRun(coll::Communicator& world, const SplitCase& c, bool split, bool deterministic = false)
      : SplitRun(world, two_nodes(world), c, split, deterministic) {}
  SplitRun(coll::Communicator& world, const coll::Topology& topo, const SplitCase& c, bool split, bool deterministic)
      : NdRun(world, topo, {c.options(split), nullptr, false, deterministic, 0, Precision::fp32, "asynchzp"}) {}
};

bool ranks_fit() { return world_size() == 2 || world_size() == 4; }

TEST(AsyncHzpTiedSplit, MatchesNoneAndTheOptionOff) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  run_then_barrier([] {
    auto world = make_world(std::max(1, world_size() / 2));
    for (const SplitCase& c : cases_at(world->size())) {
      SplitRun on(*world, c, true);
      expect_matches_none(on, false, c.label() + " split", /*step0_grads=*/true, 8);
      SplitRun off(*world, c, false), again(*world, c, true);
      for (int i = 0; i < 4; ++i) {
        const schedulers::StepStats a = off.step(i), b = again.step(i);
        EXPECT_LE(rel_diff(b.loss, a.loss), 1e-5) << c.label() << " step " << i;
        EXPECT_LE(rel_diff(b.grad_norm, a.grad_norm), 1e-5) << c.label() << " step " << i;
      }
      const std::vector<float> pa = dynamic_cast<schedulers::DataParallelScheduler&>(*off.scheduler).gather_master_params();
      const std::vector<float> pb = dynamic_cast<schedulers::DataParallelScheduler&>(*again.scheduler).gather_master_params();
      ASSERT_EQ(pa.size(), pb.size());
      EXPECT_LE(rel_l2(pb.data(), pa.data(), static_cast<std::int64_t>(pa.size())), 1e-5) << c.label();
    }
  }, 600);
}

TEST(AsyncHzpTiedSplit, DeterministicModeIsBitwiseAcrossRunsAndShardings) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  run_then_barrier([] {
    auto world = make_world(std::max(1, world_size() / 2));
    const std::vector<SplitCase> cs = cases_at(world->size());
    SplitRun a(*world, cs[0], true, true), b(*world, cs[0], true, true), other(*world, cs[1], true, true),
        inl(*world, cs[2], true, true), off(*world, cs[0], false, true);
    for (int i = 0; i < 5; ++i) {
      const schedulers::StepStats x = a.step(i), y = b.step(i), z = other.step(i), s = inl.step(i), n = off.step(i);
      EXPECT_EQ(x.loss, y.loss) << "step " << i << ": two runs differ";
      EXPECT_EQ(x.grad_norm, y.grad_norm) << "step " << i << ": two runs differ";
      EXPECT_EQ(x.grad_norm, z.grad_norm) << cs[1].label() << " step " << i << ": another sharding differs";
      EXPECT_EQ(x.grad_norm, s.grad_norm) << cs[2].label() << " step " << i << ": another sharding differs";
      EXPECT_LE(rel_diff(x.loss, n.loss), 1e-5) << "step " << i << ": against the option off";
      EXPECT_LE(rel_diff(x.grad_norm, n.grad_norm), 1e-5) << "step " << i << ": against the option off";
    }
    auto params = [](SplitRun& r) {
      return dynamic_cast<schedulers::DataParallelScheduler&>(*r.scheduler).gather_master_params();
    };
    const std::vector<float> pa = params(a), pb = params(b), pz = params(other);
    ASSERT_EQ(pa.size(), pz.size());
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0) << "two runs' parameters";
    EXPECT_EQ(std::memcmp(pa.data(), pz.data(), pa.size() * sizeof(float)), 0) << "two shardings' parameters";
  }, 600);
}

// Bytes per group and op, every group but the rows' and the loss's.
std::map<std::pair<std::string, int>, std::uint64_t> bytes_but_rows(const coll::CounterSnapshot& d) {
  std::map<std::pair<std::string, int>, std::uint64_t> out;
  for (std::size_t g = 0; g < d.groups.size(); ++g)
    for (int op = 0; op < coll::kNumCollOps; ++op) {
      if (d.groups[g] == "tied_rows" || d.groups[g] == "scalars" || d.per_group[g][op].calls == 0) continue;
      for (int l = 0; l < coll::kNumLinkLevels; ++l) out[{d.groups[g], op}] += d.per_group[g][op].level[l].bytes;
    }
  return out;
}

TEST(AsyncHzpTiedSplit, BytesAreTheOptionOffsPlusTheRowsAndThePlanIsWhatRan) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  run_then_barrier([] {
    // One node, as the plan's levels assume (an all-gather sends (W−1) shards under either algorithm).
    auto world = make_world(world_size());
    const auto w = static_cast<std::uint64_t>(world->size());
    for (const SplitCase& c : cases_at(world->size()))
      for (bool deterministic : {false, true}) {
        SCOPED_TRACE(c.label() + (deterministic ? " deterministic" : ""));
        SplitRun on(*world, one_node(*world), c, true, deterministic), off(*world, one_node(*world), c, false, deterministic);
        const coll::CounterSnapshot d_on = on.second_step_counters(*world);
        const coll::CounterSnapshot d_off = off.second_step_counters(*world);
        EXPECT_EQ(bytes_but_rows(d_on), bytes_but_rows(d_off));
        const auto t = static_cast<std::uint64_t>(on.setup.train.micro_batch_size * on.setup.model_config.seq_len);
        const auto dim = static_cast<std::uint64_t>(on.setup.model_config.hidden);
        const std::uint64_t want = (w - 1) * t * (4 + dim * (deterministic ? 8 : 4));
        const coll::OpTotals rows = d_on.total("tied_rows", CollOp::all_gather);
        EXPECT_EQ(rows.calls, 2u);
        std::uint64_t got = 0;
        for (int l = 0; l < coll::kNumLinkLevels; ++l) got += rows.level[l].bytes;
        EXPECT_EQ(got, want) << "(W-1)·T·(4 + d·b) with T = " << t << ", d = " << dim;
        expect_plan_matches_run(on.plan(c.options(true), world->size(), world->rank()), d_on);
      }
  }, 600);
}

TEST(AsyncHzpTiedSplit, RefusesStagesContextAndAnUntiedModel) {
  if (world_size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  run_then_barrier([] {
    auto world = make_world(2);
    auto refused = [&](SchedulerOptions o, bool tied, const std::string& needle) {
      SCOPED_TRACE(needle);
      o.tied_split = true;
      try {
        NdRun run(*world, two_nodes(*world), {o, [tied](workloads::LlamaConfig& m) { m.tied_embeddings = tied; }, false,
                                              false, 0, Precision::fp32, "asynchzp"});
        ADD_FAILURE() << "accepted";
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("scheduler.tied_split = true"), std::string::npos) << what;
        EXPECT_NE(what.find(needle), std::string::npos) << what;
        EXPECT_NE(what.find("Fix:"), std::string::npos) << what;
      }
    };
    SchedulerOptions pp;
    pp.pp = 2;
    refused(pp, true, "scheduler.pp = 2");
    SchedulerOptions cp;
    cp.cp = 2;
    refused(cp, true, "scheduler.cp = 2");
    refused(SchedulerOptions{}, false, "model.tied_embeddings = true");
  }, 300);
}

}  // namespace
}  // namespace hzp::test
