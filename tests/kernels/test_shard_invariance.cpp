// Deterministic mode's element-wise contract (docs/deterministic.md): every kernel a sharded optimizer
// applies to its slice gives each element the bits the whole tensor gives it, wherever the element sits in
// a shard (vector body or scalar tail, aligned or not). The chain a scheduler runs is checked as one:
// fixed point -> fp32 (float_from_fixed), the clip scale (grad_scale_inplace and AdamW's grad_scale), AdamW
// with the bf16 working copy, and casts fp32 <-> bf16, for three steps, over many random splits of 1003
// elements (shards of 1 element, odd offsets, one shard) against the unsplit tensor, bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/kernels/fixed_point.hpp"
#include "hzp/kernels/grad_norm.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

const StreamRef kHost = StreamRef::host();
constexpr std::int64_t kN = 1003;

template <typename T>
TensorView at(std::vector<T>& v, std::int64_t off, std::int64_t n) {
  return TensorView(v.data() + off, Shape{n}, dtype_of_v<T>);
}

struct State {
  std::vector<float> master, m, v, grad, scaled;
  std::vector<bf16> work, cast_bf16;
  std::vector<float> widened;
};

// One step on elements [off, off + n): what a rank holding that slice does.
void step_range(State& s, const std::vector<std::int64_t>& q, int exponent, double clip_coef, std::int64_t t,
                std::int64_t off, std::int64_t n) {
  float_from_fixed(at(s.grad, off, n), ConstTensorView(q.data() + off, Shape{n}, DType::i64), exponent, kHost);
  std::memcpy(s.scaled.data() + off, s.grad.data() + off, static_cast<std::size_t>(n) * sizeof(float));
  grad_scale_inplace(at(s.scaled, off, n), clip_coef, kHost);
  AdamWHyper h;
  h.lr = 3e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  h.step = t;
  h.grad_scale = clip_coef;
  adamw_step(at(s.master, off, n), at(s.m, off, n), at(s.v, off, n), at(s.grad, off, n), h, at(s.work, off, n), kHost);
  cast(at(s.cast_bf16, off, n), at(s.master, off, n), kHost);
  cast(at(s.widened, off, n), at(s.cast_bf16, off, n), kHost);
}

TEST(ShardInvariance, OptimizerChainIsBitwiseTheSameInAnySplit) {
  std::mt19937_64 gen(5);
  std::uniform_int_distribution<std::int64_t> qd(-(std::int64_t{1} << 50), std::int64_t{1} << 50);
  State init;
  init.master = test::random_normal<float>(kN, 1, 0.0, 0.02);
  init.m.assign(kN, 0);
  init.v.assign(kN, 0);
  init.grad.assign(kN, 0);
  init.scaled.assign(kN, 0);
  init.work.assign(kN, bf16{});
  init.cast_bf16.assign(kN, bf16{});
  init.widened.assign(kN, 0);
  std::vector<std::vector<std::int64_t>> qs(3, std::vector<std::int64_t>(kN));
  for (auto& q : qs)
    for (auto& e : q) e = qd(gen);

  // The whole tensor; the clip coefficient comes from an (unsplit) norm, as it is global in any scheduler.
  State whole = init;
  for (int t = 0; t < 3; ++t) {
    std::vector<float> g(kN);
    float_from_fixed(at(g, 0, kN), ConstTensorView(qs[t].data(), Shape{kN}, DType::i64), 44, kHost);
    const double norm = grad_norm_from_sum_squares(fixed_sum_squares(at(g, 0, kN), 40, kHost) * std::ldexp(1.0, -40));
    step_range(whole, qs[t], 44, grad_clip_coefficient(norm, 1.0), t + 1, 0, kN);
  }

  std::vector<std::vector<std::int64_t>> splits = {{0, kN}, {0, 1, 2, 3, 4, 5, 6, 7, 8, kN}, {0, 17, 18, 523, 1002, kN}};
  for (int r = 0; r < 20; ++r) {  // random cuts
    std::vector<std::int64_t> cuts = {0, kN};
    std::uniform_int_distribution<std::int64_t> c(1, kN - 1);
    for (int k = 0; k < 1 + r % 9; ++k) cuts.push_back(c(gen));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    splits.push_back(cuts);
  }
  for (const auto& cuts : splits) {
    State s = init;
    for (int t = 0; t < 3; ++t) {
      std::vector<float> g(kN);
      float_from_fixed(at(g, 0, kN), ConstTensorView(qs[t].data(), Shape{kN}, DType::i64), 44, kHost);
      const double norm = grad_norm_from_sum_squares(fixed_sum_squares(at(g, 0, kN), 40, kHost) * std::ldexp(1.0, -40));
      for (std::size_t k = 0; k + 1 < cuts.size(); ++k)
        step_range(s, qs[t], 44, grad_clip_coefficient(norm, 1.0), t + 1, cuts[k], cuts[k + 1] - cuts[k]);
    }
    const std::string label = "split into " + std::to_string(cuts.size() - 1) + " shards";
    EXPECT_EQ(std::memcmp(s.master.data(), whole.master.data(), kN * sizeof(float)), 0) << label;
    EXPECT_EQ(std::memcmp(s.m.data(), whole.m.data(), kN * sizeof(float)), 0) << label;
    EXPECT_EQ(std::memcmp(s.v.data(), whole.v.data(), kN * sizeof(float)), 0) << label;
    EXPECT_EQ(std::memcmp(s.grad.data(), whole.grad.data(), kN * sizeof(float)), 0) << label;
    EXPECT_EQ(std::memcmp(s.scaled.data(), whole.scaled.data(), kN * sizeof(float)), 0) << label;
    EXPECT_EQ(std::memcmp(s.work.data(), whole.work.data(), kN * sizeof(bf16)), 0) << label;
    EXPECT_EQ(std::memcmp(s.cast_bf16.data(), whole.cast_bf16.data(), kN * sizeof(bf16)), 0) << label;
    EXPECT_EQ(std::memcmp(s.widened.data(), whole.widened.data(), kN * sizeof(float)), 0) << label;
  }
  // The clip was active (the test would be weaker with a coefficient of 1).
  std::vector<float> g(kN);
  float_from_fixed(at(g, 0, kN), ConstTensorView(qs[0].data(), Shape{kN}, DType::i64), 44, kHost);
  EXPECT_LT(grad_clip_coefficient(std::sqrt(fixed_sum_squares(at(g, 0, kN), 40, kHost) * std::ldexp(1.0, -40)), 1.0), 1.0);
}

}  // namespace
}  // namespace hzp::kernels
