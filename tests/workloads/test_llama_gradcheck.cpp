// The whole model's gradient against central finite differences, in fp64, through the unit interface:
// every parameter tensor of every unit (tied and untied heads), sampled elements, two micro-batches
// accumulated with the global normaliser. This is the oracle for the model's backward as a whole (the
// kernels are checked one by one in tests/kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "model_test_util.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

// Parameters far from the tiny init (std 0.3, gains 1 ± 0.3), so attention, RoPE and the norms all
// shape the loss and a wrong gradient in any of them shows up well above the difference error.
std::vector<double> spread_params(const workloads::Workload& w, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> nd(0.0, 0.3);
  std::vector<double> p(static_cast<std::size_t>(w.layout().total_numel()));
  const auto& layout = w.layout();
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& t : layout.unit(u).tensors) {
      const std::int64_t base = layout.unit_offset(u) + t.offset;
      const bool gain = t.init.kind == workloads::ParamInit::Kind::ones;
      for (std::int64_t i = 0; i < t.numel(); ++i) p[static_cast<std::size_t>(base + i)] = (gain ? 1.0 : 0.0) + nd(gen);
    }
  return p;
}

void check_whole_model_gradient(const workloads::LlamaConfig& cfg, bool recompute) {
  const bool tied = cfg.tied_embeddings;
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto model = workloads::make_llama(cfg, Precision::fp64);
  const auto& layout = model->layout();
  std::vector<double> params = spread_params(*model, 7);
  const TokenBatch all = random_sequences(4, cfg.seq_len, cfg.vocab, 11);
  const auto mbs = split(all, 2, cfg.seq_len);
  const double normaliser = static_cast<double>(all.targets.size());

  std::vector<double> grads(params.size(), std::nan(""));  // NaN: any element backward skips shows up
  const double loss = run_micro_batches(*model, flat_view(params), flat_view(grads), mbs, normaliser, recompute, alloc);
  ASSERT_TRUE(std::isfinite(loss));

  auto loss_at = [&]() {
    return run_micro_batches(*model, flat_view(params), TensorView(), mbs, normaliser, false, alloc);
  };
  const double h = 1e-5;
  double worst = 0;
  std::string worst_name;
  std::mt19937 pick(3);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& t : layout.unit(u).tensors) {
      const std::int64_t base = layout.unit_offset(u) + t.offset;
      std::vector<std::int64_t> idx{0, t.numel() - 1};
      for (int r = 0; r < 10; ++r) idx.push_back(std::uniform_int_distribution<std::int64_t>(0, t.numel() - 1)(pick));
      for (std::int64_t i : idx) {
        double& p = params[static_cast<std::size_t>(base + i)];
        const double saved = p;
        p = saved + h;
        const double lp = loss_at();
        p = saved - h;
        const double lm = loss_at();
        p = saved;
        const double fd = (lp - lm) / (2 * h);
        const double g = grads[static_cast<std::size_t>(base + i)];
        // Relative to the element, with a floor of 1e-4 in the denominator: the difference's own rounding
        // noise is ~eps·loss/h ≈ 3e-11, so an element whose gradient happens to be ~1e-7 (gradients here are
        // mostly 1e-3 to 1e-1) is held to 1e-10 absolute instead of to a relative error of pure noise.
        const double denom = std::max(std::abs(fd), 1e-4);
        const double rel = std::abs(g - fd) / denom;
        EXPECT_LT(rel, 1e-6) << t.name << "[" << i << "]: backward " << g << ", finite difference " << fd;
        if (rel > worst) {
          worst = rel;
          worst_name = t.name + "[" + std::to_string(i) + "]";
        }
      }
    }
  }
  std::printf("[gradcheck] tied=%d recompute=%d loss=%.6f worst relative error %.3g at %s\n", tied, recompute, loss,
              worst, worst_name.c_str());
  EXPECT_EQ(alloc.stats().tag(AllocationTag::activation).allocated_bytes, 0u) << "activations left after backward";
}

TEST(LlamaGradcheck, WholeModelTiedFp64) { check_whole_model_gradient(shrunk_llama(true), false); }
TEST(LlamaGradcheck, WholeModelUntiedFp64) { check_whole_model_gradient(shrunk_llama(false), false); }
TEST(LlamaGradcheck, WholeModelTiedRecomputeFp64) { check_whole_model_gradient(shrunk_llama(true), true); }

// The MoE decoder: block 0 dense, block 1 with 4 routed experts (top-2) and a shared one; under recompute too
// (the routing runs again in backward and must match the forward's).
TEST(LlamaGradcheck, WholeMoeModelFp64) { check_whole_model_gradient(shrunk_moe(), false); }
TEST(LlamaGradcheck, WholeMoeModelRecomputeFp64) { check_whole_model_gradient(shrunk_moe(), true); }
// Without shared experts (the block's SwiGLU is the routed experts alone), softmax scores, every block MoE, and a
// capacity that drops assignments.
TEST(LlamaGradcheck, WholeMoeModelNoSharedSoftmaxCapacityFp64) {
  workloads::LlamaConfig c = shrunk_moe();
  c.moe.shared_experts = 0;
  c.moe.dense_layers = 0;
  c.moe.router_score = workloads::RouterScore::softmax;
  c.moe.capacity_factor = 1.0;
  check_whole_model_gradient(c, false);
}

}  // namespace
}  // namespace hzp::test
