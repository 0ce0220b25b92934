// asynchzp with context parallelism (scheduler.cp: every sequence split over the cp group, ring attention; the
// z-groups laid over the dp · cp ranks, cp innermost) under mpiexec at 2, 4 and 8 ranks, on `tiny` (T = 64):
//  - parity with `none` (whole sequences on one rank, no communication: the independent reference) over 20 fp32
//    steps: loss and gradient norm to 1e-5 relative every step and every step-0 gradient tensor to 1e-5 relative
//    L2, with the paper's layout z3 = z2 = cp, with z-groups larger and smaller than cp, async on and off, with
//    recompute and with the reduce-scatter step end;
//  - z3 = cp puts every parameter group on exactly the ranks of a cp group (from NestedGroups and the mesh);
//  - the ring's traffic per step against the formula written from the algorithm (nd_test_util.hpp), and the plan
//    equals what ran on every group (z3's all-gathers, z2's reduce-scatters, the ring on cp, the loss shares);
//  - deterministic mode: the context-parallel attention combines blocks in another order than one whole sequence,
//    so it is not bitwise `none`'s; instead asynchzp with cp is bitwise equal to nd with the same cp and dp (the
//    same per-rank attention, gradients summed exactly in fixed point whatever the sharding), and twice to itself;
//  - the refusals, one message each: z1 not a multiple of cp, cp not dividing W, a model built without the group.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../workloads/data_test_util.hpp"
#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/schedulers/common/nested_groups.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using schedulers::SchedulerOptions;
using workloads::Precision;

struct AzCase {
  int cp = 2;
  int z1 = 0, z2 = 0, z3 = 0;
  bool async = true;
  bool recompute = false;
  bool rs_end = false;
  std::string label() const {
    return "cp=" + std::to_string(cp) + " z1=" + std::to_string(z1) + " z2=" + std::to_string(z2) +
           " z3=" + std::to_string(z3) + (async ? " async" : " inline") + (recompute ? " recompute" : "") +
           (rs_end ? " step_end=reduce_scatter" : "");
  }
  SchedulerOptions options() const {
    SchedulerOptions o;
    o.cp = cp;
    o.z1 = z1;
    o.z2 = z2;
    o.z3 = z3;
    o.async = async;
    if (rs_end) o.step_end = SchedulerOptions::StepEnd::reduce_scatter;
    return o;
  }
};

coll::Topology one_node(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), world.size(), world.rank());
}

struct AzRun : NdRun {
  AzRun(coll::Communicator& world, const AzCase& c, bool deterministic = false)
      : NdRun(world, one_node(world),
              {c.options(), nullptr, c.recompute, deterministic, 0, Precision::fp32, "asynchzp"}) {}
};

// The cases at world size w (dp = w / cp).
std::vector<AzCase> cases_at(int w) {
  if (w == 2)
    return {{2, 2, 2, 2},                       // z3 = z2 = z1 = cp: the parameter group is the cp group
            {2, 2, 2, 2, false},                // inline
            {2, 2, 2, 1, true, true}};          // z3 = 1 (no gather), recompute
  if (w == 4)
    return {{2, 4, 2, 2},                       // the paper's shape: z3 = z2 = cp, z1 over dp · cp
            {2, 4, 2, 2, false},                // inline
            {4, 4, 4, 4},                       // cp4, 8 chunks of 8 tokens
            {2, 2, 2, 2, true, true},           // two replicas of z1 = cp, recompute
            {2, 4, 4, 2, true, false, true}};   // z2 spans two cp groups; reduce-scatter step end
  return {{2, 8, 2, 2},                         // z3 = z2 = cp, z1 = W
          {4, 8, 4, 4, false},                  // cp4 × dp2, inline
          {8, 8, 8, 8},                         // cp8: 16 chunks of 4 tokens
          {2, 4, 2, 2, true, true, true}};      // two replicas; recompute; reduce-scatter step end
}

TEST(AsyncHzpContext, MatchesNoneOverTwentySteps) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const AzCase& c : cases_at(world->size())) {
    AzRun az(*world, c);
    // Step 0's gradients too: the cp ranks' shares summed over the z2 groups and the replicas are the whole's.
    expect_matches_none(az, c.recompute, c.label() + " W=" + std::to_string(world->size()), true);
  }
}

TEST(AsyncHzpContext, ZThreeEqualToCpIsTheContextParallelGroup) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  for (const AzCase& c : cases_at(w)) {
    if (c.z3 != c.cp) continue;
    const schedulers::NestedGroups g = schedulers::nested_groups_from(c.options(), w);
    const coll::RankMesh mesh = schedulers::asynchzp_parallel_dims(c.options(), w).mesh(one_node(*world));
    for (int r = 0; r < w; ++r) {
      std::vector<int> z3 = g.members(r, [&](int q) { return g.z3_group(q); });
      std::sort(z3.begin(), z3.end());
      EXPECT_EQ(z3, mesh.group(schedulers::kAxisContext, r)) << c.label() << " rank " << r;
    }
  }
}

TEST(AsyncHzpContext, RingTrafficIsTheFormulaAndThePlanIsWhatRan) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const AzCase& c : cases_at(world->size()))
    for (bool deterministic : {false, true}) {
      AzRun az(*world, c, deterministic);
      const coll::CounterSnapshot d = az.second_step_counters(*world);
      SCOPED_TRACE(c.label() + (deterministic ? " deterministic" : ""));
      const schedulers::SchedulerPlan plan = az.plan(c.options(), world->size(), world->rank());
      expect_plan_matches_run(plan, d);
      expect_ring_traffic(az, d, c.cp, 1, world->size() / c.cp);
      expect_activation_plan_matches_run(az, plan, false);
    }
}

TEST(AsyncHzpContext, DeterministicModeIsBitwiseNdWithTheSameContextLayout) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  const AzCase c = cases_at(w).front();
  TinySetup ref(Precision::fp32);
  ref.train.deterministic = true;
  auto none = schedulers::make_scheduler("none", ref.args());
  SchedulerOptions nd_options;
  nd_options.cp = c.cp;
  NdRun nd(*world, one_node(*world), {nd_options, nullptr, false, true});
  AzRun a(*world, c, true), b(*world, c, true);
  AzCase sync = c;
  sync.async = false;
  sync.z3 = 1;  // another sharding of the parameters, inline
  AzRun s(*world, sync, true);
  for (int i = 0; i < 6; ++i) {
    const schedulers::StepStats want = none->step({i, ref.source.get()});
    const schedulers::StepStats x = a.step(i), y = b.step(i), z = s.step(i), n = nd.step(i);
    EXPECT_EQ(x.loss, y.loss) << c.label() << " step " << i << ": two runs differ";
    EXPECT_EQ(x.grad_norm, y.grad_norm) << c.label() << " step " << i << ": two runs differ";
    EXPECT_EQ(x.loss, n.loss) << c.label() << " step " << i << ": asynchzp and nd differ";
    EXPECT_EQ(x.grad_norm, n.grad_norm) << c.label() << " step " << i << ": asynchzp and nd differ";
    EXPECT_EQ(x.loss, z.loss) << sync.label() << " step " << i << ": another sharding differs";
    EXPECT_EQ(x.grad_norm, z.grad_norm) << sync.label() << " step " << i << ": another sharding differs";
    EXPECT_LE(rel_diff(x.loss, want.loss), 1e-5) << c.label() << " step " << i;
    EXPECT_LE(rel_diff(x.grad_norm, want.grad_norm), 1e-5) << c.label() << " step " << i;
  }
  auto& ad = dynamic_cast<schedulers::DataParallelScheduler&>(*a.scheduler);
  auto& nd_dp = dynamic_cast<schedulers::DataParallelScheduler&>(*nd.scheduler);
  const std::vector<float> pa = ad.gather_master_params(), pn = nd_dp.gather_master_params();
  ASSERT_EQ(pa.size(), pn.size());
  EXPECT_EQ(std::memcmp(pa.data(), pn.data(), pa.size() * sizeof(float)), 0) << "master parameters after 6 steps";
}

TEST(AsyncHzpContext, RefusesBadLayoutsWithOneMessage) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  SchedulerOptions o;
  o.cp = 3;  // no world here is a multiple of 3
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::scheduler_parallel_dims("asynchzp", o, w); },
                                       {"scheduler.cp = 3", "does not divide the world size W = " + std::to_string(w)}));
  if (w >= 4) {
    o.cp = 4;
    o.z1 = 2;
    EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::scheduler_parallel_dims("asynchzp", o, w); },
                                         {"scheduler.z1 = 2", "scheduler.cp = 4", "not a multiple of scheduler.cp",
                                          "fix:"}));
  }
  // A model built without the context-parallel group would train every rank on whole sequences.
  const AzCase c = cases_at(w).front();
  auto groups = std::make_unique<schedulers::ProcessGroups>(
      *world, schedulers::scheduler_parallel_dims("asynchzp", c.options(), w), one_node(*world));
  TinySetup whole_seq(Precision::fp32);
  schedulers::SchedulerArgs a = whole_seq.args();
  a.world = world.get();
  a.groups = groups.get();
  a.options = c.options();
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::make_scheduler("asynchzp", a); },
                                       {"cp = 2", "whole sequences", "ProcessGroups::context()"}));
}

}  // namespace
}  // namespace hzp::test
