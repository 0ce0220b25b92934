// `nd` with context parallelism (scheduler.cp: every sequence split over the cp group, ring attention), alone and
// composed with data, tensor (and sequence) and pipeline parallelism, under mpiexec at 2, 4 and 8 ranks, on `tiny`
// (T = 64: cp = 4 cuts it into 8 chunks of 8 tokens, cp = 8 into 16 of 4):
//  - parity with `none` (whole sequences on one rank, no communication: the independent reference) over 20 fp32
//    steps: loss and gradient norm to 1e-5 relative every step, and at tp = pp = 1 every step-0 gradient tensor
//    against none's to 1e-5 (relative L2), with recompute and with the distributed optimizer;
//  - the ring's traffic per step against a formula written here from the algorithm (not from the plan): per block
//    and micro-batch, K and V passed on cp − 1 times forward, K, V, dK and dV cp − 1 times backward plus the two
//    accumulators' last hop home (and the forward's messages again under recompute), each B·(T/cp)·(KV/tp)·D
//    elements; and the plan equals what ran on every group (plan == counters);
//  - deterministic mode: two runs bitwise equal, and within 1e-5 of none;
//  - the refusals, one message each: cp × tp × pp not dividing W, a sequence 2·cp does not divide, a model built
//    without the context-parallel group.
// The balance of attention work over the ranks (equal causally visible pairs, counted as the kernels are handed
// them) is test_ring_attention's.
#include <algorithm>
#include <cmath>
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
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using schedulers::PipelineScheduleKind;
using schedulers::SchedulerOptions;
using workloads::Precision;

struct CpCase {
  int cp = 2;
  int tp = 1;
  int pp = 1;
  bool dist = false;
  bool recompute = false;
  bool sp = false;
  std::string label() const {
    return "cp=" + std::to_string(cp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
           (dist ? " distopt" : "") + (recompute ? " recompute" : "") + (sp ? " sp" : "");
  }
  SchedulerOptions options() const {
    SchedulerOptions o;
    o.cp = cp;
    o.tp = tp;
    o.pp = pp;
    o.sequence_parallel = sp;
    o.distributed_optimizer = dist;
    o.bucket_mb = 0.05;  // several buckets
    return o;
  }
};

struct CpRun : NdRun {
  CpRun(coll::Communicator& world, const CpCase& c, bool deterministic = false)
      : NdRun(world, coll::Topology::virtual_nodes(world.size(), world.size(), world.rank()),
              {c.options(), nullptr, c.recompute, deterministic}) {}
};

// The cases at world size w (dp = w / (cp · tp · pp)).
std::vector<CpCase> cases_at(int w) {
  if (w == 2)
    return {{2}, {2, 1, 1, false, true}, {2, 1, 1, true}};  // cp2; with recompute; with the distributed optimizer
  if (w == 4)
    return {{4},                           // cp4: 8 chunks of 8 tokens
            {2},                           // cp2 × dp2
            {2, 2, 1, false, false, true}, // cp2 × tp2, sequence parallel
            {2, 2, 1, false, true},        // cp2 × tp2, recompute
            {2, 1, 2},                     // cp2 × pp2
            {2, 1, 1, true, true}};        // cp2 × dp2, distributed optimizer, recompute
  return {{2, 2},                          // cp2 × tp2 × dp2
          {8},                             // cp8: 16 chunks of 4 tokens
          {2, 2, 2, false, false, true},   // cp2 × tp2 × pp2, sequence parallel
          {4, 1, 1, true, true}};          // cp4 × dp2, distributed optimizer, recompute
}

TEST(NdContext, MatchesNoneOverTwentySteps) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const CpCase& c : cases_at(world->size())) {
    CpRun nd(*world, c);
    // At tp = pp = 1 also step 0's gradient tensor by tensor: the cp ranks' shares summed over data × context.
    expect_matches_none(nd, c.recompute, c.label() + " W=" + std::to_string(world->size()), c.tp == 1 && c.pp == 1);
  }
}

TEST(NdContext, RingTrafficIsTheFormulaAndThePlanIsWhatRan) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  for (const CpCase& c : cases_at(world->size()))
    for (bool deterministic : {false, true}) {
      CpRun nd(*world, c, deterministic);
      const coll::CounterSnapshot d = nd.second_step_counters(*world);
      SCOPED_TRACE(c.label() + (deterministic ? " deterministic" : ""));
      expect_plan_matches_run(nd.plan(c.options(), world->size(), world->rank()), d);

      expect_ring_traffic(nd, d, c.cp, c.tp, world->size() / (c.cp * c.tp * c.pp));
    }
}

TEST(NdContext, DeterministicModeRepeatsBitwise) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  const CpCase c = w == 2 ? CpCase{2} : w == 4 ? CpCase{2, 2} : CpCase{2, 2, 2};
  TinySetup ref(Precision::fp32);
  ref.train.deterministic = true;
  auto none = schedulers::make_scheduler("none", ref.args());
  CpRun a(*world, c, true), b(*world, c, true);
  for (int i = 0; i < 6; ++i) {
    const schedulers::StepStats want = none->step({i, ref.source.get()});
    const schedulers::StepStats x = a.step(i), y = b.step(i);
    EXPECT_EQ(x.loss, y.loss) << c.label() << " step " << i << ": two runs differ";
    EXPECT_EQ(x.grad_norm, y.grad_norm) << c.label() << " step " << i << ": two runs differ";
    EXPECT_LE(rel_diff(x.loss, want.loss), 1e-5) << c.label() << " step " << i;
    EXPECT_LE(rel_diff(x.grad_norm, want.grad_norm), 1e-5) << c.label() << " step " << i;
  }
}

TEST(NdContext, RefusesBadLayoutsWithOneMessage) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  SchedulerOptions o;
  o.cp = 3;  // no world here is a multiple of 3
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::scheduler_parallel_dims("nd", o, w); },
                                       {"scheduler.cp = 3", "W = " + std::to_string(w)}));
  // A sequence 2·cp does not divide: 66 = 2·33 tokens over cp = 2 (4 chunks), from the plan and from the model.
  const CpCase c{2};
  TinySetup odd(Precision::fp32, [](workloads::LlamaConfig& m) { m.seq_len = 66; });
  const std::unique_ptr<workloads::ModelSpec> spec = workloads::llama_spec(odd.model_config);
  const workloads::ParamLayout whole = spec->layout();
  schedulers::PlanInputs in;
  in.layout = &whole;
  in.model = spec.get();
  in.train = odd.train;
  in.options = c.options();
  in.world_size = w;
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::plan_scheduler("nd", in); },
                                       {"model.seq_len = 66", "2 · scheduler.cp = 4"}));
  auto groups = std::make_unique<schedulers::ProcessGroups>(
      *world, schedulers::scheduler_parallel_dims("nd", c.options(), w),
      coll::Topology::virtual_nodes(w, w, world->rank()));
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { (void)workloads::make_llama(odd.model_config, Precision::fp32, {}, {}, {groups->context()}); },
      {"model.seq_len = 66", "scheduler.cp"}));
  // A model built without the context-parallel group would train every rank on whole sequences.
  TinySetup whole_seq(Precision::fp32);
  schedulers::SchedulerArgs a = whole_seq.args();
  a.world = world.get();
  a.groups = groups.get();
  a.options = c.options();
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)schedulers::make_scheduler("nd", a); },
                                       {"cp = 2", "whole sequences", "ProcessGroups::context()"}));
}

}  // namespace
}  // namespace hzp::test
