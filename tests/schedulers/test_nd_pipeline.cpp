// `nd` with pipeline parallelism (scheduler.pp, GPipe, 1F1B and interleaved 1F1B), alone and composed with tensor
// and data parallelism, under mpiexec at 2, 4 and 8 ranks, on `tiny` (4 layers; 8 for interleaving at pp = 4):
//  - parity with `none` (the whole model on every rank, no communication: the independent reference) over 20
//    fp32 steps: loss and gradient norm to 1e-5 relative, and at tp = 1 every step-0 gradient tensor a stage
//    holds (the tied table's too, after its two stages' sum) against none's to 1e-5 (relative L2);
//  - deterministic mode with untied embeddings: bitwise equal to none (a pipeline reorders no sum); tied, to 1e-5
//    (the table's two contributions are converted to fixed point apart, none adds them in fp32 first);
//  - peak activation memory per stage from the allocator: 1F1B's first stage holds at most pp micro-batches in
//    flight, GPipe's all m;
//  - the refusals, one message each: pp × tp not dividing W, more chunks than blocks, interleaving with the
//    micro-batches not a multiple of pp, virtual stages without interleaving, a pp_layers list of the wrong sum.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../workloads/data_test_util.hpp"
#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using schedulers::PipelineScheduleKind;
using schedulers::SchedulerOptions;
using workloads::Precision;

struct PipeCase {
  int pp = 2;
  PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b;
  int v = 1;
  int tp = 1;
  bool dist = false;
  bool recompute = false;
  bool tied = true;
  int layers = 4;
  bool sp = false;  // sequence parallelism (tp > 1): the boundary activations are the rank's T/tp rows
  std::string label() const {
    return "pp=" + std::to_string(pp) + " " + std::string(schedulers::to_string(kind)) +
           (v > 1 ? " v=" + std::to_string(v) : "") + " tp=" + std::to_string(tp) + (dist ? " distopt" : "") +
           (recompute ? " recompute" : "") + (tied ? "" : " untied") + (sp ? " sp" : "") + " L=" + std::to_string(layers);
  }
  void shape(workloads::LlamaConfig& m) const {
    m.layers = layers;
    m.tied_embeddings = tied;
  }
  SchedulerOptions options() const {
    SchedulerOptions o;
    o.pp = pp;
    o.schedule = kind;
    o.virtual_stages = v;
    o.tp = tp;
    o.sequence_parallel = sp;
    o.distributed_optimizer = dist;
    o.bucket_mb = 0.05;  // several buckets per stage
    return o;
  }
};

// One run of case c over `world` (every rank on one node).
struct PipeRun : NdRun {
  PipeRun(coll::Communicator& world, const PipeCase& c, bool deterministic = false, std::int64_t global_batch = 0)
      : NdRun(world, coll::Topology::virtual_nodes(world.size(), world.size(), world.rank()),
              {c.options(), [c](workloads::LlamaConfig& m) { c.shape(m); }, c.recompute, deterministic, global_batch}) {}
};

// The cases at world size w (dp = w / (tp · pp)).
std::vector<PipeCase> cases_at(int w) {
  using K = PipelineScheduleKind;
  if (w == 2)
    return {{2, K::gpipe},
            {2, K::one_f_one_b},
            {2, K::interleaved, 2},
            {2, K::one_f_one_b, 1, 1, false, true},                // recompute
            {2, K::one_f_one_b, 1, 1, false, false, false},        // untied
            {2, K::interleaved, 2, 1, true, false, true}};         // distributed optimizer (dp = 1)
  if (w == 4)
    return {{4, K::gpipe},
            {4, K::one_f_one_b},
            {4, K::interleaved, 2, 1, false, false, true, 8},      // 8 chunks: 8 blocks
            {2, K::one_f_one_b, 1, 1, false, false, true},         // pp2 × dp2
            {2, K::interleaved, 2, 1, true, false, false},         // pp2 × dp2, distributed optimizer, untied
            {2, K::one_f_one_b, 1, 2, false, true, true},          // tp2 × pp2, recompute
            {2, K::interleaved, 2, 2, false, false, true, 4, true}};  // tp2 × pp2, interleaved, SP
  return {{2, K::one_f_one_b, 1, 2},                                // tp2 × pp2 × dp2
          {2, K::interleaved, 2, 2, true, false, false, 4, true}};  // the same, interleaved, dist. optimizer, SP
}

TEST(NdPipeline, MatchesNoneOverTwentySteps) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  constexpr int kSteps = 20;
  for (const PipeCase& c : cases_at(world->size())) {
    TinySetup ref(Precision::fp32, [&](workloads::LlamaConfig& m) { c.shape(m); });
    ref.train.recompute = c.recompute;
    auto none = schedulers::make_scheduler("none", ref.args());
    PipeRun nd(*world, c);
    const std::string label = c.label() + " W=" + std::to_string(world->size());
    double worst = 0;
    for (int i = 0; i < kSteps; ++i) {
      const schedulers::StepStats want = none->step({i, ref.source.get()});
      const schedulers::StepStats got = nd.step(i);
      worst = std::max(worst, rel_diff(got.loss, want.loss));
      EXPECT_LE(rel_diff(got.grad_norm, want.grad_norm), 1e-5) << label << " step " << i << " grad norm";
      EXPECT_GE(got.pipeline_wait_seconds, 0.0) << label;
      // Step 0's gradient, tensor by tensor, for every tensor this stage holds (a held tied table included: its
      // two stages' contributions are summed before the norm).
      if (i == 0 && c.tp == 1) expect_step0_grads_match_none(*none, nd, label);
    }
    EXPECT_LE(worst, 1e-5) << label << ": largest relative loss difference over " << kSteps << " steps";
  }
}

TEST(NdPipeline, DeterministicModeIsBitwiseNoneWithUntiedEmbeddings) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  using K = PipelineScheduleKind;
  const int w = world->size();
  std::vector<PipeCase> cases;
  if (w == 2) cases = {{2, K::gpipe, 1, 1, false, false, false}, {2, K::interleaved, 2, 1, true, false, false}};
  if (w == 4) cases = {{4, K::one_f_one_b, 1, 1, false, false, false}, {2, K::one_f_one_b, 1, 1, true, true, false}};
  if (w == 8) cases = {{2, K::one_f_one_b, 1, 1, false, false, false}};  // pp2 × dp4
  const PipeCase tied{2, K::one_f_one_b};
  if (w == 2) cases.push_back(tied);
  for (const PipeCase& c : cases) {
    TinySetup ref(Precision::fp32, [&](workloads::LlamaConfig& m) { c.shape(m); });
    ref.train.recompute = c.recompute;
    ref.train.deterministic = true;
    auto none = schedulers::make_scheduler("none", ref.args());
    PipeRun nd(*world, c, /*deterministic=*/true);
    for (int i = 0; i < 6; ++i) {
      const schedulers::StepStats want = none->step({i, ref.source.get()});
      const schedulers::StepStats got = nd.step(i);
      if (c.tied) {
        EXPECT_LE(rel_diff(got.loss, want.loss), 1e-5) << c.label() << " step " << i;
        EXPECT_LE(rel_diff(got.grad_norm, want.grad_norm), 1e-5) << c.label() << " step " << i;
      } else {
        EXPECT_EQ(got.loss, want.loss) << c.label() << " step " << i << ": loss not bitwise none's";
        EXPECT_EQ(got.grad_norm, want.grad_norm) << c.label() << " step " << i << ": norm not bitwise none's";
      }
    }
  }
}

TEST(NdPipeline, PlanIsWhatRan) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const PipeCase& c : cases_at(world->size()))
    for (bool deterministic : {false, true}) {
      PipeRun nd(*world, c, deterministic);
      const coll::CounterSnapshot d = nd.second_step_counters(*world);
      SCOPED_TRACE(c.label() + (deterministic ? " deterministic" : ""));
      const schedulers::SchedulerPlan plan = nd.plan(c.options(), world->size(), world->rank());
      expect_plan_matches_run(plan, d);
      // The pipeline's own traffic is in it: each stage's boundary activations, forward and backward.
      std::int64_t p2p = 0;
      for (const schedulers::PlannedCollective& pc : plan.collectives)
        if (pc.op == coll::CollOp::send) p2p += pc.calls;
      EXPECT_GT(p2p, 0);
      // Model state: the stage's parameters only (plus the tied table on the last stage).
      const AllocatorStats a = nd.setup.alloc->stats();
      EXPECT_EQ(a.tag(AllocationTag::param).requested_bytes, plan.state_bytes[0]);
      expect_activation_plan_matches_run(nd, plan, nd.groups->pipeline()->rank() > 0 || c.v > 1);
    }
}

// The largest activation footprint of a step on this rank: the allocator's peak of tag `activation`.
std::size_t activation_peak(PipeRun& run) {
  run.setup.alloc->reset_peaks();
  run.step(0);
  return run.setup.alloc->stats().tag(AllocationTag::activation).peak_allocated_bytes;
}

TEST(NdPipeline, OneFOneBHoldsFewerActivationsThanGPipe) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  if (w > 4) GTEST_SKIP() << "pp = W at 2 and 4 ranks covers both shapes";
  const int pp = w, m = 8;  // tiny: 8 micro-batches of 2 sequences, dp = 1
  const PipeCase gc{pp, PipelineScheduleKind::gpipe}, fc{pp, PipelineScheduleKind::one_f_one_b};
  const SchedulerOptions gpipe_opts = gc.options(), ofob_opts = fc.options();
  PipeRun gpipe(*world, gc);
  PipeRun ofob(*world, fc);
  const std::size_t g = activation_peak(gpipe), f = activation_peak(ofob);
  const int stage = gpipe.groups->pipeline()->rank();
  // GPipe holds every micro-batch's activations at the turn; 1F1B's stage s at most pp − s of them. The per
  // micro-batch footprint is the same, so the ratio is (pp − s) / m, up to one micro-batch of transient scratch.
  // The plan reads the same counts off the schedules.
  EXPECT_EQ(gpipe.plan(gpipe_opts, w, world->rank()).activations_in_flight, m);
  EXPECT_EQ(ofob.plan(ofob_opts, w, world->rank()).activations_in_flight, pp - stage);
  const double ratio = static_cast<double>(f) / static_cast<double>(g);
  const double want = static_cast<double>(pp - stage) / m;
  EXPECT_LE(ratio, want + 1.0 / m) << "stage " << stage << ": 1F1B peak " << f << " B vs GPipe " << g << " B";
  EXPECT_GE(ratio, want - 1.0 / m) << "stage " << stage << ": 1F1B peak " << f << " B vs GPipe " << g << " B";
}

TEST(NdPipeline, RefusesBadLayoutsWithOneMessage) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  using K = PipelineScheduleKind;
  SchedulerOptions o;
  // pp × tp not dividing W.
  o.pp = 3;
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::scheduler_parallel_dims("nd", o, w); },
                                       {"scheduler.pp = 3", "W = " + std::to_string(w)}));
  // More chunks than blocks: tiny has 4.
  o = {};
  o.pp = 2;
  o.schedule = K::interleaved;
  o.virtual_stages = 4;
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::pipeline_layout_from(o, 6); },
                                       {"scheduler.pp = 2", "scheduler.virtual_stages = 4", "4"}));
  // Virtual stages without interleaving, and interleaving without them.
  o.schedule = K::one_f_one_b;
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::pipeline_layout_from(o, 6); },
                                       {"scheduler.virtual_stages = 4", "1f1b"}));
  o.schedule = K::interleaved;
  o.virtual_stages = 1;
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::pipeline_layout_from(o, 6); },
                                       {"interleaved", "scheduler.virtual_stages = 1"}));
  // pp_layers of the wrong sum.
  o = {};
  o.pp = 2;
  o.pp_layers = {1, 2};
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::pipeline_layout_from(o, 6); },
                                       {"scheduler.pp_layers = [1, 2]", "4 blocks"}));
  // Interleaving with micro-batches per data-parallel rank not a multiple of pp: 3 micro-batches of 2 sequences.
  const PipeCase c{2, K::interleaved, 2};
  EXPECT_TRUE(throws_with<ConfigError>([&] { PipeRun run(*world, c, false, 2 * 3 * (w / 2)); },
                                       {"scheduler.pp = 2", "3"}));
}

}  // namespace
}  // namespace hzp::test
