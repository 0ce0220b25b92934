// `nd` (tensor parallelism with or without sequence parallelism, over data parallelism with replicas or the
// distributed optimizer) under mpiexec at 2, 4 and 8 ranks, on `tiny` in fp32:
//  - parity with `none` (run whole on every rank: the independent reference) over 20 steps, losses to 1e-5
//    relative, and the step-0 gradient gathered to whole tensors against none's to 1e-5 (relative L2 per tensor);
//  - the tensor-parallel group's collectives per step against closed forms in L, N, d and tp, at T and 2T (the
//    tensor-parallel bytes grow with T, the data-parallel bytes do not), and the plan against the counters;
//  - model-state bytes per rank per component against formulas of the rank's pieces;
//  - deterministic mode: with a fixed tp, every dp (on sub-worlds of the same job) and the distributed optimizer
//    on or off give bitwise the same losses, norms and parameters;
//  - the refusals: tp not dividing W, the heads or the vocabulary, a tensor-parallel group across virtual nodes,
//    a whole model handed to a tensor-parallel run, sequence parallelism without tensor parallelism.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../workloads/data_test_util.hpp"
#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/collectives/mesh_comm.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using schedulers::SchedulerOptions;
using workloads::Precision;

struct NdCase {
  int tp = 2;
  bool sp = false;
  bool dist = false;  // the distributed optimizer
  bool recompute = false;
  std::string label() const {
    return "tp=" + std::to_string(tp) + (sp ? " sp" : "") + (dist ? " distopt" : "") + (recompute ? " recompute" : "");
  }
  // tiny has 2 KV heads: tp = 4 runs it with 4 (one query head per KV head), reference included.
  void shape(workloads::LlamaConfig& m) const {
    if (tp == 4) m.kv_heads = 4;
  }
  SchedulerOptions options() const {
    SchedulerOptions o;
    o.tp = tp;
    o.sequence_parallel = sp;
    o.distributed_optimizer = dist;
    o.bucket_mb = 0.05;  // several buckets
    return o;
  }
  NdRunSpec spec(bool deterministic = false, std::int64_t seq_len = 0, Precision precision = Precision::fp32) const {
    return {options(),
            [this, seq_len](workloads::LlamaConfig& m) {
              shape(m);
              if (seq_len > 0) m.seq_len = seq_len;
            },
            recompute, deterministic, 0, precision};
  }
};

coll::Topology one_node(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), world.size(), world.rank());
}

// The cases run at world size w, dp = w / tp: at 2 and 4 ranks tensor parallelism 2 alone, with sequence
// parallelism, with the distributed optimizer, with recompute, and all three; tp = 4 with sequence parallelism
// from 4 ranks; at 8 ranks (slow on 2 cores) tp2×dp4 with and without the distributed optimizer and
// tp4×dp2 with everything.
std::vector<NdCase> cases_at(int w) {
  if (w >= 8) return {{2, false, false, false}, {2, true, true, false}, {4, true, true, true}};
  std::vector<NdCase> v = {{2, false, false, false}, {2, true, false, false}, {2, false, true, false},
                           {2, false, false, true}, {2, true, true, true}};
  if (w >= 4) v.push_back({4, true, false, false});
  return v;
}

TEST(Nd, MatchesNoneOverTwentySteps) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const coll::Topology topo = one_node(*world);
  constexpr int kSteps = 20;
  for (const NdCase& c : cases_at(world->size())) {
    // The reference: none on the whole model, on every rank (no communication).
    TinySetup ref(Precision::fp32, [&](workloads::LlamaConfig& m) { c.shape(m); });
    ref.train.recompute = c.recompute;
    auto none = schedulers::make_scheduler("none", ref.args());
    NdRun nd(*world, topo, c.spec());
    const std::string label = c.label() + " dp=" + std::to_string(world->size() / c.tp);
    double worst = 0;
    for (int i = 0; i < kSteps; ++i) {
      const schedulers::StepStats want = none->step({i, ref.source.get()});
      const schedulers::StepStats got = nd.step(i);
      // fp32: the tensor-parallel sums and the data-parallel reduction add in other orders than one rank's
      // matmuls and accumulation; those differences (~1e-7 relative per step) stay well inside 1e-5 over 20
      // AdamW steps on tiny, which test_data_parallel measured as the spread of two summation orders.
      worst = std::max(worst, rel_diff(got.loss, want.loss));
      EXPECT_LE(rel_diff(got.grad_norm, want.grad_norm), 1e-5) << label << " step " << i << " grad norm";
      if (i == 0) {
        GradCapture g_none, g_nd;
        none->visit_state(g_none);
        nd.scheduler->visit_state(g_nd);
        if (world->rank() == 0) {
          ASSERT_EQ(g_nd.grads.size(), g_none.grads.size()) << label;
          for (const auto& [name, want_g] : g_none.grads) {
            const auto it = g_nd.grads.find(name);
            ASSERT_TRUE(it != g_nd.grads.end()) << label << ": " << name << " missing from nd's dump";
            ASSERT_EQ(it->second.size(), want_g.size()) << label << ": " << name << " gathered whole";
            EXPECT_LE(rel_l2(it->second.data(), want_g.data(), static_cast<std::int64_t>(want_g.size())), 1e-5)
                << label << ": step-0 gradient of " << name;
          }
        } else {
          EXPECT_TRUE(g_nd.grads.empty()) << "only rank 0's visitor receives the state";
        }
      }
    }
    EXPECT_LE(worst, 1e-5) << label << ": largest relative loss difference over " << kSteps << " steps";
  }
}

// bf16-mixed: bf16 activations travel through the tensor-parallel sums and the vocabulary-parallel softmax
// (fp32 statistics). Against none in bf16-mixed over 5 steps: the two differ by bf16 rounding of the partial
// sums (each rounded once before the sum over the group), a few 1e-3 of the loss at most.
TEST(Nd, Bf16MixedFollowsNone) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const coll::Topology topo = one_node(*world);
  const NdCase c{2, true, true, false};
  TinySetup ref(Precision::bf16_mixed);
  auto none = schedulers::make_scheduler("none", ref.args());
  NdRun nd(*world, topo, c.spec(false, 0, Precision::bf16_mixed));
  for (int i = 0; i < 5; ++i) {
    const double want = none->step({i, ref.source.get()}).loss, got = nd.step(i).loss;
    EXPECT_TRUE(std::isfinite(got)) << "step " << i;
    EXPECT_LE(rel_diff(got, want), 1e-2) << "bf16-mixed " << c.label() << " step " << i;
  }
}

// The tensor-parallel collectives of one step (m micro-batches per rank, each of N = T tokens: micro-batch size
// 1 on tiny) in closed form: per block and micro-batch, without sequence parallelism 2 all-reduces of N·d in
// forward, 2 in backward (+1 under recompute); with it 2 all-gathers of N/tp·d rows and 2 reduce-scatters of N·d
// in forward, the same in backward (+2 and +1 under recompute) and the two norm weights' d-element all-reduces.
// The vocabulary-parallel ends add: the embedding's lookup sum (forward) and the LM head's input-gradient sum
// (backward) as one all-reduce or reduce-scatter each; under sequence parallelism an all-gather in the head's
// forward (and its recompute), one in the embedding's backward and the final norm's weight all-reduce; and the
// softmax's two all-reduces (N row maxima, 2N sums and target logits).
struct TpTotals {
  std::uint64_t ar_calls = 0, ag_calls = 0, rs_calls = 0;
  std::int64_t ar_elements = 0, ag_elements = 0, rs_elements = 0;
};

TpTotals expected_tp(const workloads::LlamaConfig& cfg, const NdCase& c, std::int64_t m, std::int64_t n) {
  const std::int64_t L = cfg.layers, d = cfg.hidden, rows = n / c.tp;
  TpTotals t;
  if (!c.sp) {
    const std::int64_t sums = L * (c.recompute ? 5 : 4) + 2;
    t.ar_calls = static_cast<std::uint64_t>(m * (sums + 2));
    t.ar_elements = m * (sums * n * d + 3 * n);
  } else {
    const std::int64_t gathers = L * (c.recompute ? 6 : 4) + 2 + (c.recompute ? 1 : 0), scatters = L * (c.recompute ? 5 : 4) + 2;
    t.ag_calls = static_cast<std::uint64_t>(m * gathers);
    t.ag_elements = m * gathers * rows * d;
    t.rs_calls = static_cast<std::uint64_t>(m * scatters);
    t.rs_elements = m * scatters * n * d;
    t.ar_calls = static_cast<std::uint64_t>(m * (2 * L + 1 + 2));
    t.ar_elements = m * ((2 * L + 1) * d + 3 * n);
  }
  return t;
}

TEST(Nd, CollectivesMatchClosedFormsAndThePlan) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const coll::Topology topo = one_node(*world);
  for (const NdCase& c : cases_at(world->size())) {
    std::map<int, std::uint64_t> dp_bytes;  // seq_len -> the data-parallel groups' bytes of one step
    std::map<int, std::uint64_t> tp_bytes;
    for (int seq : {32, 64}) {
      NdRun nd(*world, topo, c.spec(false, seq));
      nd.step(0);  // buckets and pools settle on the first step; count the second
      const coll::CounterSnapshot before = world->counters().snapshot();
      nd.step(1);
      const coll::CounterSnapshot d = world->counters().delta(before);
      const std::string label = c.label() + " T=" + std::to_string(seq);
      const std::int64_t m = nd.setup.train.micro_batches() / (world->size() / c.tp);
      const TpTotals want = expected_tp(nd.setup.model_config, c, m, seq * nd.setup.train.micro_batch_size);
      const coll::OpTotals ar = d.total("tp", coll::CollOp::all_reduce), ag = d.total("tp", coll::CollOp::all_gather),
                           rs = d.total("tp", coll::CollOp::reduce_scatter);
      // The tensor-parallel group also carries the norm's sum of squares when dp = 1 ... = 1 scalar (ddp engine).
      const std::uint64_t norm_calls = c.dist ? 0 : 1;
      EXPECT_EQ(ar.calls, want.ar_calls + norm_calls) << label;
      EXPECT_EQ(ar.elements, want.ar_elements + static_cast<std::int64_t>(norm_calls)) << label;
      EXPECT_EQ(ag.calls, want.ag_calls) << label;
      EXPECT_EQ(ag.elements, want.ag_elements) << label;
      EXPECT_EQ(rs.calls, want.rs_calls) << label;
      EXPECT_EQ(rs.elements, want.rs_elements) << label;

      // The plan, made from the model's declarations and the engine's, is what ran.
      const schedulers::SchedulerPlan plan = nd.plan(c.options(), world->size(), world->rank());
      expect_plan_matches_run(plan, d);
      expect_activation_plan_matches_run(nd, plan, false);

      std::uint64_t dpb = 0, tpb = 0;
      for (std::size_t g = 0; g < d.groups.size(); ++g)
        for (int op = 0; op < coll::kNumCollOps; ++op)
          for (int l = 0; l < coll::kNumLinkLevels; ++l) {
            const std::uint64_t b = d.per_group[g][op].level[l].bytes;
            if (d.groups[g] == "tp") tpb += b;
            if (d.groups[g] == "dp" || d.groups[g] == "shard") dpb += b;
          }
      dp_bytes[seq] = dpb;
      tp_bytes[seq] = tpb;
    }
    EXPECT_EQ(dp_bytes[32], dp_bytes[64]) << c.label() << ": the data-parallel bytes do not depend on T";
    EXPECT_GT(tp_bytes[64], tp_bytes[32] * 19 / 10) << c.label() << ": the tensor-parallel bytes grow with T";
  }
}

// The rank's pieces of tiny in closed form: per block the two norm gains whole, q/k/v, o, gate/up/down split
// by tp; the embedding (and an untied LM head) split by vocabulary rows; the final norm whole.
std::vector<std::int64_t> unit_numels(const workloads::LlamaConfig& c, int tp) {
  const std::int64_t d = c.hidden, hd = c.resolved_head_dim(), q = c.heads * hd * d, kv = c.kv_heads * hd * d;
  std::vector<std::int64_t> u = {c.vocab * d / tp};
  for (std::int64_t l = 0; l < c.layers; ++l) u.push_back(2 * d + (q + 2 * kv + q + 3 * c.ffn_hidden * d) / tp);
  u.push_back(d + (c.tied_embeddings ? 0 : c.vocab * d / tp));
  return u;
}

TEST(Nd, ModelStateBytesPerRankMatchTheFormulas) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const coll::Topology topo = one_node(*world);
  for (const NdCase& c : cases_at(world->size())) {
    NdRun nd(*world, topo, c.spec());
    const std::vector<std::int64_t> units = unit_numels(nd.setup.model_config, c.tp);
    const std::int64_t dp = world->size() / c.tp;
    std::int64_t n = 0, padded = 0, slice = 0;
    for (std::int64_t u : units) {
      n += u;
      const std::int64_t s = (u + dp - 1) / dp;  // each unit padded to a multiple of dp, sliced dp ways
      padded += s * dp;
      slice += s;
    }
    const AllocatorStats stats = nd.setup.alloc->stats();
    const std::uint64_t want_param = static_cast<std::uint64_t>(c.dist ? padded : n) * 4;
    const std::uint64_t want_opt = static_cast<std::uint64_t>(c.dist ? slice : n) * 4;
    EXPECT_EQ(stats.tag(AllocationTag::param).requested_bytes, want_param) << c.label();
    EXPECT_EQ(stats.tag(AllocationTag::grad).requested_bytes, want_param) << c.label() << " (fp32 gradients, full)";
    EXPECT_EQ(stats.tag(AllocationTag::adam_m).requested_bytes, want_opt) << c.label();
    EXPECT_EQ(stats.tag(AllocationTag::adam_v).requested_bytes, want_opt) << c.label();
    EXPECT_EQ(stats.tag(AllocationTag::master).requested_bytes, 0u) << c.label() << " (fp32: no separate master)";
  }
}

// Deterministic mode: with tp = 2 fixed, dp = 1 (the first two ranks alone), dp = W/2, and the distributed
// optimizer on or off give the same bits.
TEST(Nd, DeterministicModeIsBitwiseAcrossDpAndTheOptimizer) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int r = world->rank();
  constexpr int kSteps = 4;
  auto run = [&](coll::Communicator& comm, bool dist) {
    NdCase c{2, true, dist, false};
    NdRun nd(comm, one_node(comm), c.spec(/*deterministic=*/true));
    std::vector<double> out;
    for (int i = 0; i < kSteps; ++i) {
      const schedulers::StepStats st = nd.step(i);
      out.push_back(st.loss);
      out.push_back(st.grad_norm);
    }
    auto* dps = dynamic_cast<schedulers::DataParallelScheduler*>(nd.scheduler.get());
    const std::vector<float> p = dps->gather_master_params();  // this rank's pieces, gathered over dp
    for (float x : p) out.push_back(x);
    return out;
  };
  const std::vector<double> replicas = run(*world, false), sharded = run(*world, true);
  EXPECT_TRUE(replicas == sharded) << "distributed optimizer on and off differ at dp = " << world->size() / 2;
  // dp = 1: the first two ranks on their own (a sub-world), the others idle.
  auto pair = world->split(r < 2 ? 0 : 1, r, "pair");
  if (r < 2) {
    const std::vector<double> alone = run(*pair, false);
    EXPECT_TRUE(alone == replicas) << "tp = 2 at dp = 1 and dp = " << world->size() / 2 << " differ";
  }
  world->barrier();
}

TEST(Nd, RefusesBadLayoutsWithOneMessage) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  SchedulerOptions o;
  o.tp = 3;
  if (w % 3 != 0) {
    EXPECT_TRUE(throws_with<ConfigError>([&] { schedulers::scheduler_parallel_dims("nd", o, w); },
                                         {"scheduler.tp = 3", "W = " + std::to_string(w)}));
  }
  o.tp = 1;
  o.sequence_parallel = true;
  EXPECT_TRUE(throws_with<ConfigError>([&] { schedulers::scheduler_parallel_dims("nd", o, w); },
                                       {"sequence_parallel", "scheduler.tp = 1"}));
  // tp must divide the heads, the KV heads, the MLP width and the vocabulary (the model's own check).
  TinySetup s(Precision::fp32, [](workloads::LlamaConfig& m) { m.vocab = 63; });
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_layout(s.model_config, 2, 0); },
                                       {"tp = 2", "model.vocab = 63"}));
  // A tensor-parallel group across virtual nodes (one rank per node) unless allowed.
  o.tp = 2;
  o.sequence_parallel = false;
  const coll::Topology spread = coll::Topology::virtual_nodes(w, 1, world->rank());
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { schedulers::ProcessGroups g(*world, schedulers::scheduler_parallel_dims("nd", o, w), spread); },
      {"tp = 2", "spans nodes", "tp_across_nodes"}));
  o.tp_across_nodes = true;
  EXPECT_NO_THROW(schedulers::ProcessGroups g(*world, schedulers::scheduler_parallel_dims("nd", o, w), spread));
  // A whole model handed to a tensor-parallel run.
  o.tp_across_nodes = false;
  const coll::Topology topo = one_node(*world);
  schedulers::ProcessGroups groups(*world, schedulers::scheduler_parallel_dims("nd", o, w), topo);
  TinySetup whole(Precision::fp32);
  schedulers::SchedulerArgs a = whole.args();
  a.world = world.get();
  a.topology = &topo;
  a.groups = &groups;
  a.options = o;
  EXPECT_TRUE(throws_with<ConfigError>([&] { schedulers::make_scheduler("nd", a); },
                                       {"tp = 2", "no tensor-parallel pieces", "built whole"}));
  // Micro-batches that the data-parallel degree does not divide (tiny: 8 per step).
  if (w >= 4) {
    TinySetup odd(Precision::fp32);
    odd.train.global_batch = 6;  // 3 micro-batches of 2 over dp = W/2
    odd.model = workloads::make_llama(odd.model_config, Precision::fp32, {groups.tensor(), false});
    a = odd.args();
    a.world = world.get();
    a.topology = &topo;
    a.groups = &groups;
    a.options = o;
    EXPECT_TRUE(throws_with<ConfigError>([&] { schedulers::make_scheduler("nd", a); },
                                         {"train.global_batch = 6", "dp = " + std::to_string(w / 2)}));
  }
}

}  // namespace
}  // namespace hzp::test
