// asynchzp with pipeline stages (scheduler.pp: each stage's units sharded over that stage's dp · cp ranks by its own
// z-groups, the stage's schedule run by the shared step driver) under mpiexec at 2, 4 and 8 ranks, on `tiny`:
//  - parity with `none` (the whole model on one rank, no communication: the independent reference) over 20 fp32
//    steps, loss and gradient norm to 1e-5 relative every step: 1F1B, GPipe and interleaved 1F1B, async and inline,
//    with data parallelism inside a stage, with context parallelism (pp2 × cp2, the paper's 36B shape), pp4, both
//    step ends, recompute;
//  - the plan equals what ran on every group (each stage's z-groups, the boundary activations, the tied table's
//    two stages, the norm over z1 on every stage), also in deterministic mode;
//  - deterministic mode bitwise equal to nd with the same pipeline and context layout (both sum every gradient in
//    fixed point and add the tied table's two stages exactly) and twice to itself;
//  - the step end (exchange, refresh, norm, the tied table's stages) stays per stage and does not grow with the
//    micro-batches, while the per-micro-batch collectives double with them (from the plan, which PlanIsWhatRan ties
//    to the counters);
//  - the refusals: pp not dividing W, a stage's ranks that z1 does not divide.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../workloads/data_test_util.hpp"
#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/plan.hpp"

namespace hzp::test {
namespace {

using schedulers::PipelineScheduleKind;
using schedulers::SchedulerOptions;
using workloads::Precision;

struct PpCase {
  int pp = 2;
  int cp = 1;
  int z1 = 0, z2 = 0, z3 = 0;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int v = 1;
  bool async = true;
  bool recompute = false;
  bool rs_end = false;
  bool reuse = true, merge = true;  // scheduler.pp_reuse, scheduler.rs_merge
  std::string label() const {
    return "pp=" + std::to_string(pp) + " cp=" + std::to_string(cp) + " z1=" + std::to_string(z1) +
           " z2=" + std::to_string(z2) + " z3=" + std::to_string(z3) + " " + std::string(schedulers::to_string(schedule)) +
           (v > 1 ? " v=" + std::to_string(v) : "") + (async ? " async" : " inline") + (recompute ? " recompute" : "") +
           (rs_end ? " step_end=reduce_scatter" : "") + (reuse ? "" : " no-reuse") + (merge ? "" : " no-merge");
  }
  SchedulerOptions options() const {
    SchedulerOptions o;
    o.pp = pp;
    o.cp = cp;
    o.z1 = z1;
    o.z2 = z2;
    o.z3 = z3;
    o.schedule = schedule;
    o.virtual_stages = v;
    o.async = async;
    if (rs_end) o.step_end = SchedulerOptions::StepEnd::reduce_scatter;
    o.pp_reuse = reuse;
    o.rs_merge = merge;
    return o;
  }
};

coll::Topology one_node(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), world.size(), world.rank());
}

struct PpRun : NdRun {
  PpRun(coll::Communicator& world, const PpCase& c, bool deterministic = false)
      : NdRun(world, one_node(world), {c.options(), nullptr, c.recompute, deterministic, 0, Precision::fp32, "asynchzp"}) {}
};

using K = PipelineScheduleKind;

// The cases at world size w.
std::vector<PpCase> cases_at(int w) {
  if (w == 2)
    return {{2},                                         // one rank per stage: z = 1
            {2, 1, 0, 0, 0, K::gpipe, 1, false},         // GPipe, inline
            {2, 1, 0, 0, 0, K::interleaved, 2},          // interleaved 1F1B, two chunks per stage
            {2, 1, 0, 0, 0, K::one_f_one_b, 1, true, false, false, false, false}};  // no reuse, no merging
  if (w == 4)
    return {{2, 1, 2, 2, 2},                             // pp2 × dp2, z = 2 per stage
            {2, 1, 2, 2, 1, K::one_f_one_b, 1, false},   // inline, z3 = 1
            {2, 2, 2, 2, 2},                             // pp2 × cp2: z3 = z2 = cp
            {4},                                         // pp4
            {2, 1, 2, 2, 2, K::interleaved, 2, true, true},  // interleaved, recompute
            {2, 1, 2, 2, 2, K::one_f_one_b, 1, true, false, false, false, true},   // no reuse, async
            {2, 1, 2, 2, 2, K::one_f_one_b, 1, false, false, false, true, false},  // no merging, inline
            {2, 1, 2, 2, 2, K::interleaved, 2, false, false, false, false, false}};  // neither, inline
  return {{2, 2, 4, 2, 2},                               // pp2 × cp2 × dp2: z1 = 4, z2 = z3 = cp
          {4, 1, 2, 2, 2, K::one_f_one_b, 1, false},     // pp4 × dp2 inline
          {2, 1, 4, 2, 2, K::one_f_one_b, 1, true, false, true},  // two replicas per stage, reduce-scatter end
          {2, 2, 4, 2, 2, K::one_f_one_b, 1, false, false, false, false, false}};  // pp2 × cp2, neither, inline
}

TEST(AsyncHzpPipeline, MatchesNoneOverTwentySteps) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const PpCase& c : cases_at(world->size())) {
    PpRun az(*world, c);
    expect_matches_none(az, c.recompute, c.label() + " W=" + std::to_string(world->size()), false);
  }
}

TEST(AsyncHzpPipeline, PlanIsWhatRan) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const PpCase& c : cases_at(world->size()))
    for (bool deterministic : {false, true}) {
      PpRun az(*world, c, deterministic);
      const coll::CounterSnapshot d = az.second_step_counters(*world);
      SCOPED_TRACE(c.label() + (deterministic ? " deterministic" : ""));
      const schedulers::SchedulerPlan plan = az.plan(c.options(), world->size(), world->rank());
      expect_plan_matches_run(plan, d);
      std::int64_t p2p = 0;  // the boundary activations are in it
      for (const schedulers::PlannedCollective& pc : plan.collectives)
        if (pc.op == coll::CollOp::send && pc.group == "pp") p2p += pc.calls;
      EXPECT_GT(p2p, 0);
      // Model state: the stage's parameters' shard only.
      EXPECT_EQ(az.setup.alloc->stats().tag(AllocationTag::param).requested_bytes, plan.state_bytes[0]);
      expect_activation_plan_matches_run(az, plan, az.groups->pipeline()->rank() > 0 || c.v > 1);
    }
}

TEST(AsyncHzpPipeline, DeterministicModeIsBitwiseNdWithTheSameLayout) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  const PpCase c = w == 2 ? PpCase{2} : w == 4 ? PpCase{2, 2, 2, 2, 2} : PpCase{2, 2, 4, 2, 2};
  SchedulerOptions nd_options;
  nd_options.pp = c.pp;
  nd_options.cp = c.cp;
  NdRun nd(*world, one_node(*world), {nd_options, nullptr, false, true});
  PpRun a(*world, c, true), b(*world, c, true);
  TinySetup ref(Precision::fp32);
  ref.train.deterministic = true;
  auto none = schedulers::make_scheduler("none", ref.args());
  for (int i = 0; i < 6; ++i) {
    const schedulers::StepStats want = none->step({i, ref.source.get()});
    const schedulers::StepStats x = a.step(i), y = b.step(i), n = nd.step(i);
    EXPECT_EQ(x.loss, y.loss) << c.label() << " step " << i << ": two runs differ";
    EXPECT_EQ(x.grad_norm, y.grad_norm) << c.label() << " step " << i << ": two runs differ";
    EXPECT_EQ(x.loss, n.loss) << c.label() << " step " << i << ": asynchzp and nd differ";
    EXPECT_EQ(x.grad_norm, n.grad_norm) << c.label() << " step " << i << ": asynchzp and nd differ";
    EXPECT_LE(rel_diff(x.loss, want.loss), 1e-5) << c.label() << " step " << i;
    EXPECT_LE(rel_diff(x.grad_norm, want.grad_norm), 1e-5) << c.label() << " step " << i;
  }
}

// Calls and elements per (group, op) of a plan.
std::map<std::pair<std::string, int>, std::pair<std::int64_t, std::int64_t>> totals(const schedulers::SchedulerPlan& p) {
  std::map<std::pair<std::string, int>, std::pair<std::int64_t, std::int64_t>> t;
  for (const schedulers::PlannedCollective& c : p.collectives) {
    auto& e = t[{c.group, static_cast<int>(c.op)}];
    e.first += c.calls;
    e.second += c.elements;
  }
  return t;
}

TEST(AsyncHzpPipeline, StepEndStaysPerStageAndDoesNotGrowWithTheMicroBatches) {
  // Twice the micro-batches (global batch 16 -> 32 at micro-batch 2): the per-micro-batch gathers, reduce-scatters
  // and activations double; the step end (exchange over the replicas, refresh, norm, the tied table's two stages)
  // is the same, and its groups never leave the stage (the norm's z1 group and the embedding pair excepted).
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  // Without reuse and merging, so that every micro-batch gathers and reduce-scatters (with them the counts follow
  // CollectiveCountsFollowReuseAndMerging's formulas instead).
  PpCase c = w == 2 ? PpCase{2} : w == 4 ? PpCase{2, 1, 2, 2, 2} : PpCase{2, 1, 4, 2, 2};
  c.reuse = c.merge = false;
  const auto plan_at = [&](std::int64_t global_batch) {
    TinySetup s(Precision::fp32);
    s.train.global_batch = global_batch;
    return plan_for("asynchzp", s.model_config, s.train, c.options(), w, world->rank());
  };
  const auto once = totals(plan_at(16)), twice = totals(plan_at(32));
  ASSERT_EQ(once.size(), twice.size());
  const int per_stage = w / c.pp, stage = world->rank() / per_stage;
  for (const auto& [key, v] : once) {
    const auto& [group, op] = key;
    const auto u = twice.at(key);
    const bool per_micro_batch =
        group == "z3" || group == "z2" || (group == "pp" && op != static_cast<int>(coll::CollOp::all_reduce));
    if (per_micro_batch) {
      EXPECT_EQ(u.first, 2 * v.first) << group << " op " << op;
      EXPECT_EQ(u.second, 2 * v.second) << group << " op " << op;
    } else if (group == "replica" || group == "refresh" || group == "opt_replica" || group == "embedding" ||
               group == "z1") {
      EXPECT_EQ(u, v) << group << " op " << op << ": the step end grew with the micro-batches";
    }
  }
  for (const schedulers::PlannedCollective& pc : plan_at(16).collectives) {
    if (pc.group == "replica" || pc.group == "refresh" || pc.group == "opt_replica") {
      EXPECT_LE(pc.group_size, per_stage) << pc.group << " on stage " << stage;
    }
  }
}

// scheduler.pp_reuse and scheduler.rs_merge: all-gathers (z3) and reduce-scatters (z2) per stage and step, planned
// for every rank of W = 2·pp ranks (two per stage, z1 = z2 = z3 = 2), against formulas. The plan is what runs
// (PlanIsWhatRan runs these options' defaults, and the cases without them). tiny's blocks per chunk use: its units,
// plus the tied table on the head's stage (held there for the LM head). With one chunk per stage (1F1B, stage s of
// pp, m micro-batches, w = min(pp − s − 1, m) warm-up forwards): reuse gathers each block once per step, against
// 2m (a forward and a backward per micro-batch); merging reduce-scatters each block max(m − w, 1) times, against m
// (the cool-down's w backwards and the last steady one are one run). Interleaved (pp, m, v) = (2, 8, 2): the runs
// counted by hand on the schedule (stage 0: F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 ...
// B5c0 B6c1 B7c1 B6c0 B7c0; a chunk is regathered where its uses are more than one action apart).
TEST(AsyncHzpPipeline, CollectiveCountsFollowReuseAndMerging) {
  struct Shape {
    int pp, m, v;
    std::vector<std::vector<int>> blocks;  // per stage, per local chunk: blocks gathered for one use
    // Interleaved only: per stage, per chunk, the gathers (reuse on) and reduce-scatter runs (merge on) per block.
    std::vector<std::vector<int>> gathers_on, rs_on;
  };
  const std::vector<Shape> shapes = {
      {2, 4, 1, {{3}, {4}}, {}, {}},                  // stage 0: embedding + 2 blocks; stage 1: 2 blocks + head + table
      {2, 8, 2, {{2, 1}, {1, 3}}, {{6, 3}, {5, 4}}, {{7, 7}, {7, 8}}},
      {4, 8, 1, {{2}, {1}, {1}, {3}}, {}, {}},
  };
  for (const Shape& sh : shapes) {
    const int w = 2 * sh.pp;
    for (bool reuse : {false, true})
      for (bool merge : {false, true}) {
        PpCase c{sh.pp, 1, 2, 2, 2, sh.v > 1 ? K::interleaved : K::one_f_one_b, sh.v};
        c.reuse = reuse;
        c.merge = merge;
        TinySetup s(Precision::fp32);
        s.train.global_batch = 4 * sh.m;  // micro-batches of 2, dp = 2 per stage
        for (int r = 0; r < w; ++r) {
          const int stage = r / 2;
          const auto t = totals(plan_for("asynchzp", s.model_config, s.train, c.options(), w, r));
          std::int64_t gathers = 0, scatters = 0;
          for (int ch = 0; ch < sh.v; ++ch) {
            const int n = sh.blocks[static_cast<std::size_t>(stage)][static_cast<std::size_t>(ch)];
            const int warm = std::min(sh.pp - stage - 1, sh.m);
            const int g = !reuse ? 2 * sh.m
                          : sh.v == 1 ? 1
                                      : sh.gathers_on[static_cast<std::size_t>(stage)][static_cast<std::size_t>(ch)];
            const int rs = !merge ? sh.m
                           : sh.v == 1 ? std::max(sh.m - warm, 1)
                                       : sh.rs_on[static_cast<std::size_t>(stage)][static_cast<std::size_t>(ch)];
            gathers += std::int64_t{g} * n;
            scatters += std::int64_t{rs} * n;
          }
          const std::string where = "(pp, m, v) = (" + std::to_string(sh.pp) + ", " + std::to_string(sh.m) + ", " +
                                    std::to_string(sh.v) + ") stage " + std::to_string(stage) +
                                    (reuse ? " reuse" : "") + (merge ? " merge" : "");
          EXPECT_EQ(t.at({"z3", static_cast<int>(coll::CollOp::all_gather)}).first, gathers) << where;
          EXPECT_EQ(t.at({"z2", static_cast<int>(coll::CollOp::reduce_scatter)}).first, scatters) << where;
        }
      }
  }
}

// With reuse and one chunk per stage the stage's parameters stay gathered through the step: the allocator's
// communication tag holds at least the whole stage's blocks at its peak (they are allocator memory, not ring slots,
// since the ring is sized for blocks in flight); without reuse it holds a few at a time.
TEST(AsyncHzpPipeline, ReuseHoldsTheStageParametersAndSaysWhere) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  PpCase on = w == 2 ? PpCase{2} : PpCase{2, 1, 2, 2, 2};
  PpCase off = on;
  off.reuse = false;
  PpRun a(*world, on), b(*world, off);
  a.step(0);
  b.step(0);
  const std::size_t with = a.setup.alloc->stats().tag(AllocationTag::comm).peak_requested_bytes;
  const std::size_t without = b.setup.alloc->stats().tag(AllocationTag::comm).peak_requested_bytes;
  // The stage's parameters whole: its z3 shard (padded blocks / z3) times z3.
  const std::size_t param_shard = a.setup.alloc->stats().tag(AllocationTag::param).requested_bytes;
  const int z3 = on.z3 > 0 ? on.z3 : w / on.pp;
  EXPECT_GE(with, param_shard * static_cast<std::size_t>(z3)) << "reuse: the stage's blocks held whole";
  EXPECT_LT(without, with) << "without reuse fewer blocks are held at once";
}

TEST(AsyncHzpPipeline, RefusesBadLayoutsWithOneMessage) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  SchedulerOptions o;
  o.pp = 3;  // no world here is a multiple of 3
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::scheduler_parallel_dims("asynchzp", o, w); },
                                       {"scheduler.pp = 3", "does not divide the world size W = " + std::to_string(w)}));
  o.pp = 2;
  o.z1 = w;  // larger than a stage's W / 2 ranks
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::scheduler_parallel_dims("asynchzp", o, w); },
                                       {"scheduler.z1 = " + std::to_string(w), "ranks of a pipeline stage (W / pp)",
                                        "fix:"}));
}

}  // namespace
}  // namespace hzp::test
