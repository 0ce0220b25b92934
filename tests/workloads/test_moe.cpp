// The MoE layer (moe.hpp) against independent references: the routed experts' forward against a plain fp64
// loop over tokens and their chosen experts (sigmoid and softmax scores, a bias, capacity), their backward
// against central finite differences of <dy, y> (+ the weighted auxiliary loss), the bias rule and the capacity
// order on hand-made inputs with values worked out here, and the keys' refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/moe.hpp"
#include "kernel_test_util.hpp"
#include "moe_reference.hpp"

namespace hzp::test {
namespace {

struct Forward {
  std::vector<double> y;
  double aux = 0;
  std::int64_t dropped = 0;
};

Forward run_forward(const Problem& p, double aux_weight, CachingAllocator& alloc) {
  Forward f;
  f.y.assign(static_cast<std::size_t>(p.N * p.d), 0.0);
  workloads::MoeSaved saved;
  workloads::moe_experts_forward(p.c, view(p.h, Shape{p.N, p.d}), weights(p), p.bias, aux_weight,
                                 view(f.y, Shape{p.N, p.d}), saved, alloc, StreamRef::host());
  f.aux = saved.aux;
  f.dropped = saved.routing.dropped;
  return f;
}

void check_forward(RouterScore score, double capacity, bool with_bias) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const Problem p = make_problem(score, MoeBalance::bias, capacity, with_bias, 5);
  std::int64_t want_dropped = 0;
  const std::vector<double> want = reference_forward(p, &want_dropped);
  const Forward got = run_forward(p, 0.0, alloc);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got.y[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-12 * scale) << "score " << workloads::to_string(score) << " capacity " << capacity;
  EXPECT_EQ(got.dropped, want_dropped);
  if (capacity > 0) {
    EXPECT_GT(want_dropped, 0) << "the capacity case should drop something";
  }
  EXPECT_EQ(alloc.stats().tag(AllocationTag::workspace).allocated_bytes, 0u);
}

TEST(MoeExperts, ForwardMatchesTokenLoopSigmoid) { check_forward(RouterScore::sigmoid, 0, false); }
TEST(MoeExperts, ForwardMatchesTokenLoopSoftmaxWithBias) { check_forward(RouterScore::softmax, 0, true); }
TEST(MoeExperts, ForwardMatchesTokenLoopWithCapacity) { check_forward(RouterScore::sigmoid, 1.0, true); }

// Backward against central differences of L = <dy, y> + w·aux, for h and every weight tensor (all elements).
void check_backward(RouterScore score, MoeBalance balance, double capacity) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  Problem p = make_problem(score, balance, capacity, balance == MoeBalance::bias, 9);
  const double aux_weight = balance == MoeBalance::aux_loss ? 0.8 : 0.0;
  std::mt19937_64 gen(4);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> dy(static_cast<std::size_t>(p.N * p.d));
  for (double& v : dy) v = nd(gen);
  auto objective = [&]() {
    const Forward f = run_forward(p, aux_weight, alloc);
    double l = aux_weight * f.aux;
    for (std::size_t i = 0; i < dy.size(); ++i) l += dy[i] * f.y[i];
    return l;
  };
  const std::int64_t E = p.c.experts, F = p.c.expert_ffn;
  // Gradients: dh starts at 1 everywhere (backward adds to it), weight gradients at NaN (overwritten).
  std::vector<double> dh(p.h.size(), 1.0), dr(p.router.size(), std::nan("")), dg(p.wg.size(), std::nan("")),
      du(p.wu.size(), std::nan("")), dd(p.wd.size(), std::nan(""));
  {
    std::vector<double> y(static_cast<std::size_t>(p.N * p.d), 0.0);
    workloads::MoeSaved saved;
    workloads::moe_experts_forward(p.c, view(p.h, Shape{p.N, p.d}), weights(p), p.bias, aux_weight,
                                   view(y, Shape{p.N, p.d}), saved, alloc, StreamRef::host());
    workloads::moe_experts_backward(p.c, view(dy, Shape{p.N, p.d}), view(p.h, Shape{p.N, p.d}), weights(p),
                                    {view(dr, Shape{E, p.d}), view(dg, Shape{E, F, p.d}), view(du, Shape{E, F, p.d}),
                                     view(dd, Shape{E, p.d, F}), false},
                                    view(dh, Shape{p.N, p.d}), saved, alloc, StreamRef::host());
    EXPECT_FALSE(saved.held());
  }
  EXPECT_EQ(alloc.stats().tag(AllocationTag::activation).allocated_bytes, 0u);
  // dh started at 1: backward added the gradient to it.
  std::vector<double> gh(dh.size());
  for (std::size_t i = 0; i < dh.size(); ++i) gh[i] = dh[i] - 1.0;
  const std::string label = std::string(workloads::to_string(score)) + " " +
                            std::string(workloads::to_string(balance)) + " cf=" + std::to_string(capacity) + ": ";
  EXPECT_TRUE(check_gradient(label + "h", p.h, gh, objective));
  EXPECT_TRUE(check_gradient(label + "router", p.router, dr, objective));
  EXPECT_TRUE(check_gradient(label + "w_gate", p.wg, dg, objective));
  EXPECT_TRUE(check_gradient(label + "w_up", p.wu, du, objective));
  EXPECT_TRUE(check_gradient(label + "w_down", p.wd, dd, objective));
}

TEST(MoeExperts, BackwardMatchesFiniteDifferencesSigmoidBias) {
  check_backward(RouterScore::sigmoid, MoeBalance::bias, 0);
}
TEST(MoeExperts, BackwardMatchesFiniteDifferencesSoftmaxAuxLoss) {
  check_backward(RouterScore::softmax, MoeBalance::aux_loss, 0);
}
TEST(MoeExperts, BackwardMatchesFiniteDifferencesSigmoidAuxLossWithCapacity) {
  check_backward(RouterScore::sigmoid, MoeBalance::aux_loss, 1.0);
}

TEST(MoeBalance, BiasUpdateFollowsItsFormula) {
  // mean load = (10 + 2 + 6 + 6) / 4 = 6: expert 0 is over (−γ), expert 1 under (+γ), 2 and 3 exactly average.
  std::vector<double> bias = {0.0, 0.5, -0.25, 0.125};
  const std::vector<double> load = {10, 2, 6, 6};
  workloads::update_balance_bias(bias, load, 0.01);
  EXPECT_EQ(bias[0], 0.0 - 0.01);
  EXPECT_EQ(bias[1], 0.5 + 0.01);
  EXPECT_EQ(bias[2], -0.25);
  EXPECT_EQ(bias[3], 0.125);
}

TEST(MoeBalance, AuxLossIsItsFormulaOnAHandMadeRouting) {
  // Two tokens, two experts, top-1, softmax scores given directly: f = (1/2, 1/2), P = mean of the scores.
  MoeConfig c;
  c.experts = 2;
  c.top_k = 1;
  c.expert_ffn = 1;
  c.router_score = RouterScore::softmax;
  c.aux_loss_coef = 0.1;
  workloads::MoeRouting r;
  r.tokens = 2;
  r.experts = 2;
  r.top_k = 1;
  r.scores = {0.75, 0.25, 0.375, 0.625};
  r.load = {1, 1};
  // α·E·Σ f_e·P_e = 0.1·2·(0.5·0.5625 + 0.5·0.4375) = 0.1
  EXPECT_NEAR(workloads::aux_loss_of(c, r), 0.1, 1e-15);
}

TEST(MoeRouting, CapacityDropsTheAssignmentsBeyondItInAssignmentOrder) {
  // 6 tokens, 4 experts, top-2, capacity factor 1: ceil(1·6·2/4) = 3 assignments per expert. Tokens 0-4 prefer
  // experts (0, 1), token 5 prefers (2, 3): expert 0 admits tokens 0, 1, 2 and drops 3, 4; so does expert 1.
  MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.expert_ffn = 1;
  c.capacity_factor = 1.0;
  EXPECT_EQ(workloads::capacity_of(c, 6), 3);
  std::vector<double> logits;
  for (int t = 0; t < 5; ++t) logits.insert(logits.end(), {2.0, 1.0, -1.0, -2.0});
  logits.insert(logits.end(), {-2.0, -1.0, 2.0, 1.0});
  const workloads::MoeRouting r = workloads::route_tokens(c, logits, {}, 6);
  const std::vector<std::int32_t> want_expert = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3};
  EXPECT_EQ(r.expert, want_expert);
  // Sorted rows: expert 0 = assignments 0, 2, 4; expert 1 = 1, 3, 5; expert 2 = 10; expert 3 = 11.
  const std::vector<std::int64_t> want_slot = {0, 3, 1, 4, 2, 5, -1, -1, -1, -1, 6, 7};
  EXPECT_EQ(r.slot, want_slot);
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(r.kept(), 8);
  const std::vector<std::int64_t> want_load = {5, 5, 1, 1};  // what balancing reads: chosen, dropped or not
  EXPECT_EQ(r.load, want_load);
  // Dropless: nothing dropped, every expert's rows in assignment order.
  c.capacity_factor = 0;
  EXPECT_EQ(workloads::route_tokens(c, logits, {}, 6).dropped, 0);
}

TEST(MoeRouting, BiasChoosesButDoesNotGate) {
  // sigmoid scores of logits (1, 0, 0, -1); a bias of +1 on expert 3 makes it the first choice, yet the gates
  // are the chosen scores normalised: s3 / (s3 + s0) and s0 / (s3 + s0).
  MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.expert_ffn = 1;
  const std::vector<double> logits = {1.0, 0.0, 0.0, -1.0};
  const std::vector<double> bias = {0.0, 0.0, 0.0, 1.0};
  const workloads::MoeRouting r = workloads::route_tokens(c, logits, bias, 1);
  const std::vector<std::int32_t> want = {3, 0};
  EXPECT_EQ(r.expert, want);
  const double s0 = 1 / (1 + std::exp(-1.0)), s3 = 1 / (1 + std::exp(1.0));
  EXPECT_NEAR(r.gate[0], s3 / (s0 + s3), 1e-15);
  EXPECT_NEAR(r.gate[1], s0 / (s0 + s3), 1e-15);
  // Ties go to the lower index: experts 1 and 2 score alike without a bias.
  const workloads::MoeRouting tie = workloads::route_tokens(c, std::vector<double>{0, 0, 0, 0}, {}, 1);
  EXPECT_EQ(tie.expert, (std::vector<std::int32_t>{0, 1}));
}

// One ConfigError naming the key, the value and the fix.
void expect_refused(workloads::LlamaConfig c, const std::string& key_and_value) {
  try {
    c.validate();
    ADD_FAILURE() << key_and_value << " was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(key_and_value), std::string::npos) << m;
    EXPECT_NE(m.find("fix"), std::string::npos) << m;
  }
}

TEST(MoeConfig, BadKeysAreRefusedNamingKeyValueAndFix) {
  workloads::LlamaConfig c;  // tiny's shape
  c.moe.experts = 8;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 64;
  EXPECT_NO_THROW(c.validate());
  auto with = [&](auto edit) {
    workloads::LlamaConfig b = c;
    edit(b.moe);
    return b;
  };
  expect_refused(with([](MoeConfig& m) { m.top_k = 9; }), "model.top_k = 9");
  expect_refused(with([](MoeConfig& m) { m.top_k = 0; }), "model.top_k = 0");
  expect_refused(with([](MoeConfig& m) { m.expert_ffn = 0; }), "model.expert_ffn = 0");
  expect_refused(with([](MoeConfig& m) { m.capacity_factor = 0.5; }), "model.capacity_factor = 0.5");
  expect_refused(with([](MoeConfig& m) { m.dense_layers = 5; }), "model.dense_layers = 5");
  expect_refused(with([](MoeConfig& m) { m.shared_experts = -1; }), "model.shared_experts = -1");
  expect_refused(with([](MoeConfig& m) { m.experts = -2; }), "model.experts = -2");
  // A dense model ignores the MoE keys.
  workloads::LlamaConfig dense;
  dense.moe.top_k = 99;
  EXPECT_NO_THROW(dense.validate());
  // Tensor parallelism splits the shared experts' width like the dense MLP's: tp must divide it.
  workloads::LlamaConfig odd = c;
  odd.moe.shared_experts = 1;
  odd.moe.expert_ffn = 63;
  try {
    workloads::check_tensor_parallel(odd, 2);
    ADD_FAILURE() << "tp = 2 with a shared-expert width of 63 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.shared_experts x model.expert_ffn = 1 x 63"), std::string::npos)
        << e.what();
  }
}

TEST(MoeConfig, CountsActiveParametersOnly) {
  // tiny-moe's block 1: attention 4·64·64 - (2 heads of kv: wk, wv 32 rows each) ... computed from the shapes.
  workloads::LlamaConfig c;
  c.moe.experts = 8;
  c.moe.top_k = 2;
  c.moe.shared_experts = 1;
  c.moe.expert_ffn = 64;
  c.moe.dense_layers = 1;
  const std::int64_t d = 64, attn = d * 64 * 2 + d * 32 * 2, dense_mlp = 3 * d * 192;
  const std::int64_t expert = 3 * d * 64, router = 8 * d;
  const std::int64_t moe_block_all = 2 * d + attn + expert /*shared*/ + router + 8 * expert;
  const std::int64_t moe_block_active = 2 * d + attn + expert + router + 2 * expert;
  const std::int64_t emb = 64 * d;
  EXPECT_EQ(c.num_params(), emb + (2 * d + attn + dense_mlp) + 3 * moe_block_all + d);
  EXPECT_EQ(c.num_active_params(), emb + (2 * d + attn + dense_mlp) + 3 * moe_block_active + d);
  EXPECT_EQ(c.num_matmul_params(), (attn + dense_mlp) + 3 * (moe_block_active - 2 * d) + emb);
}

}  // namespace
}  // namespace hzp::test
