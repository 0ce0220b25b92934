// nd with expert parallelism (scheduler.ep; docs/nd-parallel.md "Expert parallelism") under mpiexec, on tiny's shape
// with tiny-moe's experts (8 routed, top-2, 1 shared, block 0 dense), fp32:
// - parity with `none` over 12 steps: losses and gradient norms to 1e-5 relative every step, the final parameters
//   (every expert and tensor-parallel piece gathered whole) to 1e-5 relative L2 per tensor and the balancing bias
//   equal: ep2, ep2 with recompute and a capacity that drops, tp2 without ep (capacity), ep2 × cp2 (2 ranks); ep4,
//   ep2 × dp2, ep2 × pp2 (losses and norms), ep2 × tp2 (capacity), ep2 × tp2 with sequence parallelism and
//   recompute, ep2 × cp2, ep4 × cp2 with recompute (4 ranks);
// - the all-to-alls per step against closed forms: one all-to-all of E counts per MoE block and forward, four
//   all-to-all-v of rows; dispatched rows are every kept assignment of the rank's tokens (N·k·d elements per
//   micro-batch, dropless), so summed over the group the all-to-all-v moves 4·P·N·k·d per block and micro-batch;
//   and the plan against the counters (all-to-all-v by calls; its elements are the balanced expectation, which
//   times P is the group's sum); beside tp and cp the same over the world with each rank's row share, the tp row
//   shares' step-end sum of the routers and expert pieces, and the plan against the counters;
// - the distributed optimizer (dense slices over data × context, expert slices over the expert-data group): parity
//   as above for ep2 and tp2 (2 ranks), ep2 × dp2, ep2 × tp2, ep2 × cp2 and ep2 × pp2 (4 ranks); its reduce-scatters
//   per step against the rank's dense and expert elements (up to each unit's padding), no dense sum over ep, the plan
//   against the counters and the model state per component against the plan;
// - the refusals, each one message naming the key, the value and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../workloads/data_test_util.hpp"
#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using schedulers::SchedulerOptions;
using workloads::Precision;

void tiny_moe(workloads::LlamaConfig& c) { c.moe = workloads::model_preset("tiny-moe").model.moe; }
// The long parity runs hold the bias at zero. The bias rule is discontinuous: an expert whose load is exactly the
// mean (on tiny-moe the mean is an integer, 256, so this happens) keeps its bias, one assignment more or less moves
// it by γ, and fp32 sums in another order (any data-parallel layout, expert-parallel or not: nd at dp2 without ep
// does the same) flip such an assignment after a few steps. The bias itself is compared over the first steps with
// the preset's rate (BiasFollowsNone).
void tiny_moe_still(workloads::LlamaConfig& c) {
  tiny_moe(c);
  c.moe.bias_update_rate = 0;
}
void tiny_moe_capacity(workloads::LlamaConfig& c) {
  tiny_moe_still(c);
  c.moe.capacity_factor = 1.0;  // an evenly balanced batch fits exactly: some assignments drop
}

coll::Topology one_node(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), world.size(), world.rank());
}

// Every tensor of one component of a state dump, whole, by name.
class Capture final : public schedulers::StateVisitor {
 public:
  explicit Capture(std::string component) : component_(std::move(component)) {}
  void tensor(std::string_view component, std::string_view name, ConstTensorView full) override {
    if (component != component_) return;
    const auto* p = full.as<const float>();
    tensors[std::string(name)] = std::vector<float>(p, p + full.numel());
  }
  std::map<std::string, std::vector<float>> tensors;

 private:
  std::string component_;
};

std::vector<double> metric(const workloads::Workload& model, const std::string& name) {
  for (const workloads::StepMetric& m : model.step_metrics())
    if (m.name == name) return m.values;
  return {};
}

struct EpCase {
  std::string label;
  int ep = 2, pp = 1;
  bool recompute = false;
  void (*shape)(workloads::LlamaConfig&) = tiny_moe_still;
  int tp = 1, cp = 1;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;  // the expert optimizer (nd_expert_optimizer.cpp)
};

std::vector<EpCase> cases_at(int w) {
  if (w == 2)
    return {{"ep2", 2},
            {"ep2 recompute capacity 1.0", 2, 1, true, tiny_moe_capacity},
            // MoE under tensor parallelism without ep: the tp ranks split the rows over whole experts.
            {"tp2 (ep1) capacity 1.0", 1, 1, false, tiny_moe_capacity, 2},
            // The ep group is the cp group: each rank's tokens are its chunks of the same sequences.
            {"ep2 x cp2", 2, 1, false, tiny_moe_still, 1, 2},
            // The distributed optimizer: dense slices over data × context, expert slices over the expert-data group.
            {"ep2 distributed optimizer", 2, 1, false, tiny_moe_still, 1, 1, false, true},
            {"tp2 (ep1) distributed optimizer capacity 1.0", 1, 1, false, tiny_moe_capacity, 2, 1, false, true}};
  if (w == 4)
    return {{"ep4", 4},
            {"ep2 x dp2", 2},
            {"ep2 x pp2", 2, 2},
            {"ep2 x tp2 capacity 1.0", 2, 1, false, tiny_moe_capacity, 2},
            {"ep2 x tp2 sequence parallel recompute", 2, 1, true, tiny_moe_still, 2, 1, true},
            {"ep2 x cp2", 2, 1, false, tiny_moe_still, 1, 2},
            {"ep4 x cp2 recompute", 4, 1, true, tiny_moe_still, 1, 2},
            {"ep2 x dp2 distributed optimizer", 2, 1, false, tiny_moe_still, 1, 1, false, true},
            {"ep2 x tp2 distributed optimizer capacity 1.0", 2, 1, false, tiny_moe_capacity, 2, 1, false, true},
            {"ep2 x cp2 distributed optimizer", 2, 1, false, tiny_moe_still, 1, 2, false, true},
            {"ep2 x pp2 distributed optimizer", 2, 2, false, tiny_moe_still, 1, 1, false, true}};
  return {};
}

NdRunSpec spec_of(const EpCase& c) {
  NdRunSpec spec;
  spec.options.ep = c.ep;
  spec.options.pp = c.pp;
  spec.options.tp = c.tp;
  spec.options.cp = c.cp;
  spec.options.sequence_parallel = c.sequence_parallel;
  spec.options.distributed_optimizer = c.distributed_optimizer;
  spec.shape = c.shape;
  spec.recompute = c.recompute;
  return spec;
}

TEST(NdExpert, MatchesNone) {
  auto world = make_world(world_size());
  const coll::Topology topo = one_node(*world);
  constexpr int kSteps = 12;
  const std::vector<EpCase> cases = cases_at(world->size());
  if (cases.empty()) GTEST_SKIP() << "cases for 2 and 4 ranks";
  run_then_barrier([&] {
    for (const EpCase& c : cases) {
      SCOPED_TRACE(c.label);
      TinySetup ref(Precision::fp32, c.shape);
      ref.train.recompute = c.recompute;
      auto none = schedulers::make_scheduler("none", ref.args());
      NdRun run(*world, topo, spec_of(c));
      double worst = 0;
      for (int i = 0; i < kSteps; ++i) {
        const schedulers::StepStats want = none->step({i, ref.source.get()});
        const schedulers::StepStats got = run.step(i);
        worst = std::max(worst, rel_diff(got.loss, want.loss));
        EXPECT_LE(rel_diff(got.grad_norm, want.grad_norm), 1e-5) << c.label << " step " << i << " grad norm";
      }
      EXPECT_LE(worst, 1e-5) << c.label << ": largest relative loss difference over " << kSteps << " steps";
      if (world->rank() == 0) std::printf("[%s] largest relative loss difference %.3g\n", c.label.c_str(), worst);
      if (c.pp > 1) continue;  // a stage holds its own blocks: the dump is compared at pp = 1
      Capture mine("param"), theirs("param");
      run.scheduler->visit_state(mine);  // collective: the expert pieces gathered over the ep group to rank 0
      none->visit_state(theirs);
      if (world->rank() != 0) continue;
      EXPECT_EQ(mine.tensors.size(), theirs.tensors.size());
      for (const auto& [name, want] : theirs.tensors) {
        const auto it = mine.tensors.find(name);
        ASSERT_TRUE(it != mine.tensors.end()) << name;
        ASSERT_EQ(it->second.size(), want.size()) << name;
        EXPECT_LE(rel_l2(it->second.data(), want.data(), static_cast<std::int64_t>(want.size())), 1e-5)
            << c.label << ": final " << name;
      }
    }
  }, 600);
}

// Routing and capacity are decided on each rank's tokens as on one rank, and the load is summed over the data-parallel
// group (ep included; and over the cp group, whose ranks hold different tokens of each sequence; a tp group routes
// every token alike and counts it once) before the update: the bias after every step equals none's (a rank updating
// from its own tokens' load, or from its ep group's, would differ from the first step on). Over the first 4 steps,
// before fp32 sums in another order can flip an assignment at an exactly average load (see tiny_moe_still).
TEST(NdExpert, BiasFollowsNone) {
  auto world = make_world(world_size());
  const int w = world->size();
  if (w != 2 && w != 4) GTEST_SKIP() << "ep = W at 2 and 4 ranks";
  const coll::Topology topo = one_node(*world);
  const std::vector<EpCase> cases = {{"ep = W", w, 1, false, tiny_moe},
                                     {"ep2 x cp2", 2, 1, false, tiny_moe, 1, 2},
                                     {"tp2", w / 2, 1, false, tiny_moe, 2}};
  run_then_barrier([&] {
    for (const EpCase& c : cases) {
      SCOPED_TRACE(c.label);
      TinySetup ref(Precision::fp32, tiny_moe);
      auto none = schedulers::make_scheduler("none", ref.args());
      NdRun run(*world, topo, spec_of(c));
      for (int i = 0; i < 4; ++i) {
        none->step({i, ref.source.get()});
        run.step(i);
        const std::vector<double> want = metric(*ref.model, "moe/bias"), got = metric(*run.setup.model, "moe/bias");
        ASSERT_EQ(got.size(), want.size());
        ASSERT_FALSE(want.empty());
        for (std::size_t e = 0; e < want.size(); ++e) EXPECT_EQ(got[e], want[e]) << "step " << i << " bias " << e;
        EXPECT_EQ(metric(*run.setup.model, "moe/load"), metric(*ref.model, "moe/load")) << "step " << i;
      }
    }
  }, 120);
}

TEST(NdExpert, AllToAllsMatchClosedFormsAndThePlan) {
  auto world = make_world(world_size());
  const int w = world->size();
  if (w != 2 && w != 4) GTEST_SKIP() << "ep = W at 2 and 4 ranks";
  const coll::Topology topo = one_node(*world);
  run_then_barrier([&] {
    for (bool recompute : {false, true}) {
      NdRunSpec spec;
      spec.options.ep = w;
      spec.shape = tiny_moe;
      spec.recompute = recompute;
      NdRun run(*world, topo, spec);
      const coll::CounterSnapshot d = run.second_step_counters(*world);
      const workloads::LlamaConfig& m = run.setup.model_config;
      const std::int64_t blocks = m.layers - m.moe.dense_layers, mb = run.setup.train.micro_batches() / w;
      const std::int64_t rows = run.setup.train.micro_batch_size * m.seq_len * m.moe.top_k;  // kept, dropless
      const coll::OpTotals counts = d.total("ep", coll::CollOp::all_to_all);
      const coll::OpTotals a2av = d.total("ep", coll::CollOp::all_to_allv);
      const std::int64_t passes = recompute ? 2 : 1;  // forwards per block and micro-batch
      EXPECT_EQ(counts.calls, static_cast<std::uint64_t>(blocks * mb * passes));
      EXPECT_EQ(counts.elements, blocks * mb * passes * m.moe.experts);
      EXPECT_EQ(a2av.calls, static_cast<std::uint64_t>(blocks * mb * (2 * passes + 2)));
      // Each dispatch (forward and the outputs' gradients) sends the rank's kept rows; the combines send back what
      // arrived, which over the group adds up to the same.
      std::int64_t group = a2av.elements;
      world->all_reduce(TensorView(&group, Shape{1}, DType::i64), coll::ReduceOp::sum, StreamRef::host());
      EXPECT_EQ(group, (2 * passes + 2) * blocks * mb * w * rows * m.hidden);
      EXPECT_GE(a2av.elements, (passes + 1) * blocks * mb * rows * m.hidden);
      // The plan: every call, and the all-to-all-v at the balanced expectation (the group's mean).
      const schedulers::SchedulerPlan plan = run.plan(spec.options, w, world->rank());
      expect_plan_matches_run(plan, d, /*routed_calls_only=*/true);
      std::int64_t planned = 0;
      for (const schedulers::PlannedCollective& c : plan.collectives)
        if (c.group == "ep" && c.op == coll::CollOp::all_to_allv) {
          planned += c.elements;
          EXPECT_NE(c.when.str().find("balanced expectation"), std::string::npos) << c.when;
        }
      EXPECT_EQ(planned * w, group);
      if (world->rank() == 0)
        std::printf("[nd ep%d%s] per step: %llu all_to_all, %llu all_to_allv, %lld elements on rank 0, %lld over the "
                    "group (plan: %lld per rank)\n",
                    w, recompute ? " recompute" : "", static_cast<unsigned long long>(counts.calls),
                    static_cast<unsigned long long>(a2av.calls), static_cast<long long>(a2av.elements),
                    static_cast<long long>(group), static_cast<long long>(planned));
    }
  }, 300);
}

// Expert parallelism beside tensor and context parallelism: each rank dispatches its share of the rows (1/tp of its
// cp chunk's tokens), so over the world the all-to-all-v moves (2·passes + 2)·blocks·m·W·(N/(cp·tp))·k·d elements per
// step (m micro-batches per rank); the router's and experts' gradients, each tp rank's row share, are summed over tp
// once per step ("tp_grads": every element of the rank's routers and expert pieces); everything else as the plan says.
TEST(NdExpert, CompositeLayoutsMatchClosedFormsAndThePlan) {
  auto world = make_world(world_size());
  const int w = world->size();
  std::vector<EpCase> cases;
  if (w == 2)
    cases = {{"tp2 (ep1)", 1, 1, false, tiny_moe, 2},
             {"ep2 x cp2", 2, 1, false, tiny_moe, 1, 2},
             {"ep2 distributed optimizer", 2, 1, false, tiny_moe, 1, 1, false, true},
             {"tp2 (ep1) distributed optimizer", 1, 1, false, tiny_moe, 2, 1, false, true}};
  if (w == 4)
    cases = {{"ep2 x tp2", 2, 1, false, tiny_moe, 2},
             {"ep2 x tp2 sequence parallel recompute", 2, 1, true, tiny_moe, 2, 1, true},
             {"ep2 x cp2 recompute", 2, 1, true, tiny_moe, 1, 2},
             {"ep2 x dp2 distributed optimizer", 2, 1, false, tiny_moe, 1, 1, false, true},
             {"ep2 x tp2 distributed optimizer", 2, 1, false, tiny_moe, 2, 1, false, true},
             {"ep2 x cp2 distributed optimizer", 2, 1, false, tiny_moe, 1, 2, false, true}};
  if (cases.empty()) GTEST_SKIP() << "cases for 2 and 4 ranks";
  const coll::Topology topo = one_node(*world);
  run_then_barrier([&] {
    for (const EpCase& c : cases) {
      SCOPED_TRACE(c.label);
      const NdRunSpec spec = spec_of(c);
      NdRun run(*world, topo, spec);
      const coll::CounterSnapshot d = run.second_step_counters(*world);
      const workloads::LlamaConfig& m = run.setup.model_config;
      const std::int64_t dp = w / (c.tp * c.cp), blocks = m.layers - m.moe.dense_layers;
      const std::int64_t mb = run.setup.train.micro_batches() / dp, passes = c.recompute ? 2 : 1;
      const std::int64_t rows = run.setup.train.micro_batch_size * m.seq_len / (c.cp * c.tp) * m.moe.top_k;
      std::int64_t group = d.total("ep", coll::CollOp::all_to_allv).elements;
      world->all_reduce(TensorView(&group, Shape{1}, DType::i64), coll::ReduceOp::sum, StreamRef::host());
      EXPECT_EQ(group, c.ep > 1 ? (2 * passes + 2) * blocks * mb * w * rows * m.hidden : 0);
      const coll::OpTotals shares = d.total("tp_grads", coll::CollOp::all_reduce);
      const std::int64_t experts_here = m.moe.experts / c.ep;
      const std::int64_t per_block = m.moe.experts * m.hidden + 3 * experts_here * m.moe.expert_ffn * m.hidden;
      EXPECT_EQ(shares.elements, c.tp > 1 ? blocks * per_block : 0);
      if (c.distributed_optimizer) {
        // Expert pieces reduce-scattered once per step over the ranks holding the same experts, the rest over data ×
        // context (each unit's part padded by fewer elements than its group's size), no dense sum over ep.
        const std::int64_t edp = dp * c.cp / c.ep, units = run.setup.model->layout().num_units();
        const std::int64_t experts = blocks * 3 * experts_here * m.moe.expert_ffn * m.hidden;
        const std::int64_t e_rs = d.total("edp", coll::CollOp::reduce_scatter).elements;
        EXPECT_GE(e_rs, c.ep > 1 ? experts : 0);
        EXPECT_LT(e_rs, c.ep > 1 ? experts + blocks * edp : 1);
        const std::int64_t dense = run.setup.model->layout().total_numel() - (c.ep > 1 ? experts : 0);
        const std::int64_t d_rs = d.total("shard", coll::CollOp::reduce_scatter).elements;
        EXPECT_GE(d_rs, dense);
        EXPECT_LT(d_rs, dense + units * dp * c.cp);
        EXPECT_EQ(d.total("ep_grads", coll::CollOp::all_reduce).calls, 0u);
      }
      const schedulers::SchedulerPlan plan = run.plan(spec.options, w, world->rank());
      expect_plan_matches_run(plan, d, /*routed_calls_only=*/true);
      if (c.distributed_optimizer) {
        // Model state by component as the plan says: the flat parameters and gradient, m and v of the two slices.
        const AllocatorStats a = run.setup.alloc->stats();
        const AllocationTag tags[] = {AllocationTag::param, AllocationTag::grad, AllocationTag::master,
                                      AllocationTag::adam_m, AllocationTag::adam_v};
        for (std::size_t i = 0; i < 5; ++i)
          EXPECT_EQ(a.tag(tags[i]).requested_bytes, plan.state_bytes[i]) << "component " << i;
      }
    }
  }, 300);
}

// The distributed optimizer with expert pieces sums in fp32 only: deterministic mode is refused by name.
TEST(NdExpert, DistributedOptimizerRefusesDeterministicMode) {
  auto world = make_world(world_size());
  if (world->size() != 2) GTEST_SKIP() << "2 ranks";
  const coll::Topology topo = one_node(*world);
  NdRunSpec spec = spec_of({"ep2 distributed optimizer", 2, 1, false, tiny_moe_still, 1, 1, false, true});
  spec.deterministic = true;
  EXPECT_TRUE(throws_with<ConfigError>([&] { NdRun run(*world, topo, spec); },
                                       {"train.deterministic = true", "scheduler.ep = 2", "Fix"}));
  // The plan refuses the same (hzpbench plan and validate go through it).
  TinySetup s(Precision::fp32, tiny_moe_still);
  s.train.deterministic = true;
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)plan_for("nd", s.model_config, s.train, spec.options, 2, 0); },
                                       {"train.deterministic = true", "scheduler.ep = 2", "Fix"}));
}

TEST(NdExpert, RefusesBadLayoutsWithOneMessage) {
  SchedulerOptions o;
  o.ep = 3;  // does not divide dp = 4
  EXPECT_TRUE(throws_with<ConfigError>([&] { schedulers::scheduler_parallel_dims("nd", o, 4); },
                                       {"scheduler.ep = 3", "dp = W / (tp · cp · pp) = 4", "Fix"}));
  o.ep = 2;  // world not divisible: dp = 3
  EXPECT_TRUE(throws_with<ConfigError>([&] { schedulers::scheduler_parallel_dims("nd", o, 3); },
                                       {"scheduler.ep = 2", "= 3", "Fix"}));
  // The model's side: ep without experts, ep not dividing the experts, top_k above the experts.
  workloads::LlamaConfig dense = workloads::model_preset("tiny").model;
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_expert_parallel_layout(dense, 2, 0); },
                                       {"scheduler.ep = 2", "model.experts = 0", "fix"}));
  workloads::LlamaConfig moe = dense;
  tiny_moe(moe);
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_expert_parallel_layout(moe, 3, 0); },
                                       {"scheduler.ep = 3", "does not divide model.experts = 8", "fix"}));
  // Tokens split over cp: capacity and the auxiliary loss are statistics of the whole micro-batch.
  workloads::MoeConfig capped = moe.moe;
  capped.capacity_factor = 1.25;
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::check_moe_token_split(capped, "scheduler.cp", 2); },
                                       {"scheduler.cp = 2", "model.capacity_factor = 1.25", "fix"}));
  workloads::MoeConfig aux = moe.moe;
  aux.balance = workloads::MoeBalance::aux_loss;
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::check_moe_token_split(aux, "scheduler.cp", 2); },
                                       {"scheduler.cp = 2", "model.balance = aux_loss", "fix"}));
  // tp must divide the shared experts' width, and the distributed optimizer does not sum the tp row shares.
  workloads::LlamaConfig odd = moe;
  odd.moe.expert_ffn = 63;
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_layout(odd, 2, 0); },
                                       {"tp = 2", "model.shared_experts x model.expert_ffn", "63", "fix"}));
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { schedulers::refuse_tp_shares(workloads::llama_expert_parallel_layout(moe, 2, 0, 2, 0), 2, "nd"); },
      {"scheduler.tp = 2", "scheduler.distributed_optimizer = true", "Fix"}));
  workloads::LlamaConfig wide = moe;
  wide.moe.top_k = 9;
  EXPECT_TRUE(throws_with<ConfigError>([&] { wide.validate(); }, {"model.top_k = 9", "model.experts = 8", "fix"}));
  // The plan refuses the same (hzpbench plan and validate go through it).
  TinySetup s(Precision::fp32);
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)plan_for("nd", dense, s.train, o, 4, 0); },
                                       {"scheduler.ep = 2", "model.experts = 0"}));
  // A pieces' layout is the whole model's, experts cut: ep2 holds experts 4..7 on rank 1, initialised as the whole.
  const workloads::ParamLayout whole = workloads::llama_layout(moe), half = workloads::llama_expert_parallel_layout(moe, 2, 1);
  EXPECT_EQ(whole.total_numel() - half.total_numel(),
            (moe.layers - moe.moe.dense_layers) * 3 * (moe.moe.experts / 2) * moe.moe.expert_ffn * moe.hidden);
  std::vector<float> a(static_cast<std::size_t>(whole.total_numel())), b(static_cast<std::size_t>(half.total_numel()));
  workloads::init_params(whole, 0, std::span<float>(a), 7);
  workloads::init_params(half, 0, std::span<float>(b), 7);
  for (int u = 0; u < half.num_units(); ++u)
    for (int t = 0; t < static_cast<int>(half.unit(u).tensors.size()); ++t) {
      const workloads::ParamTensor& p = half.unit(u).tensors[static_cast<std::size_t>(t)];
      const std::int64_t from = whole.tensor_offset(u, t) + (p.shard.sharded() ? p.numel() : 0);  // rank 1: 2nd half
      EXPECT_EQ(0, std::memcmp(b.data() + half.tensor_offset(u, t), a.data() + from, static_cast<std::size_t>(p.numel()) * 4))
          << p.name;
    }
}

}  // namespace
}  // namespace hzp::test
