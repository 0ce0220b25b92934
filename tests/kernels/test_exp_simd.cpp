// Tests of the vectorised fp32 exponential and the rows built on it (kernels/common/exp_simd.hpp,
// softmax_simd.hpp, swiglu/swiglu_simd.hpp): accuracy against exp in double over a sample of every fp32 input,
// the special values and the ends of the range, independence of an element's bits from its lane, the row passes
// against scalar references, and the baseline and AVX2 builds giving the same bits, from exp up to the
// cross-entropy, SwiGLU and attention launchers (and AdamW's loop, built the same two ways).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "common/softmax_simd.hpp"
#include "adamw/adamw_ref.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/cpu_isa.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/swiglu.hpp"
#include "kernel_test_util.hpp"
#include "swiglu/swiglu_simd.hpp"

namespace hzp::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// Restores the ISA the kernels dispatched to before the test.
struct IsaGuard {
  CpuIsa before = cpu_isa();
  ~IsaGuard() { set_cpu_isa(before); }
};

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> v{CpuIsa::baseline};
  if (cpu_isa_supported(CpuIsa::avx2)) v.push_back(CpuIsa::avx2);
  return v;
}

/// |got − exact| in units of the last place of the fp32 value nearest to `exact` (subnormal spacing 2^−149
/// below 2^−126); 0 when both are the same infinity.
double ulp_error(float got, double exact) {
  const float nearest = static_cast<float>(exact);
  if (std::isinf(nearest) || std::isinf(got)) return nearest == got ? 0.0 : kInf;
  int e = 0;
  std::frexp(static_cast<double>(nearest == 0.0f ? std::numeric_limits<float>::denorm_min() : nearest), &e);
  return std::fabs(static_cast<double>(got) - exact) / std::ldexp(1.0, std::max(e - 24, -149));
}

std::vector<float> exp_of(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  simd::exp(y.data(), x.data(), static_cast<std::int64_t>(x.size()));
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every 251st fp32 bit pattern (17 million inputs of every sign and exponent; the exhaustive sweep of all 2^32,
// with the same result, is in docs/workloads.md): within one ulp of exp in double, 0.990 measured.
TEST(ExpSimd, WithinOneUlpOfExpInDoubleAcrossTheFp32Range) {
  IsaGuard guard;
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 251)
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    const auto y = exp_of(x);
    double worst = 0.0;
    float worst_x = 0.0f;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        ASSERT_TRUE(std::isnan(y[i])) << "exp(NaN) = " << y[i];
        continue;
      }
      const double err = ulp_error(y[i], std::exp(static_cast<double>(x[i])));
      if (err > worst) {
        worst = err;
        worst_x = x[i];
      }
    }
    EXPECT_LT(worst, 1.0) << cpu_isa_name(isa) << ": worst at x = " << worst_x;
  }
}

TEST(ExpSimd, SpecialValuesAndTheEndsOfTheRange) {
  IsaGuard guard;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float below_overflow = std::nextafter(88.72283935546875f, 0.0f);  // the largest x with e^x < FLT_MAX
  const std::vector<float> x{kInf,  -kInf,  nan,   -nan,   0.0f,          -0.0f,        1e-30f, -1e-30f,
                             1e30f, -1e30f, 89.0f, 88.8f,  below_overflow, -103.97f,    -104.0f, -87.4f,
                             1.0f,  -1.0f,  std::numeric_limits<float>::denorm_min(), -126.0f, 200.0f, -200.0f};
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    SCOPED_TRACE(cpu_isa_name(isa));
    const auto y = exp_of(x);
    EXPECT_EQ(y[0], kInf);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_FALSE(std::signbit(y[1]));
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_TRUE(std::isnan(y[3]));
    for (int i : {4, 5, 6, 7, 18}) EXPECT_EQ(y[static_cast<std::size_t>(i)], 1.0f) << "x = " << x[i];
    EXPECT_EQ(y[8], kInf);
    EXPECT_EQ(y[9], 0.0f);
    EXPECT_EQ(y[10], kInf);
    EXPECT_EQ(y[11], kInf);
    EXPECT_TRUE(std::isfinite(y[12]));
    EXPECT_EQ(y[13], std::numeric_limits<float>::denorm_min());  // e^−103.97 ≈ 0.501 · 2^−149 rounds up
    EXPECT_EQ(y[14], 0.0f);
    EXPECT_EQ(y[20], kInf);
    EXPECT_EQ(y[21], 0.0f);
    // Normal, subnormal and overflowing results agree with exp in double rounded to fp32 within an ulp.
    for (std::size_t i = 8; i < x.size(); ++i)
      EXPECT_LT(ulp_error(y[i], std::exp(static_cast<double>(x[i]))), 1.0) << "x = " << x[i];
  }
}

// A range of the intra-op pool may start anywhere, and a row's ragged end goes through a padded vector: an
// element's bits must not depend on where it sits.
TEST(ExpSimd, AnElementsBitsDoNotDependOnItsLane) {
  const auto x = test::random_uniform<float>(203, 1, -30.0, 30.0);
  const auto whole = exp_of(x);
  for (std::size_t off = 1; off < 12; ++off)
    for (std::size_t len : {std::size_t{1}, std::size_t{5}, std::size_t{8}, std::size_t{13}, x.size() - off}) {
      std::vector<float> part(x.begin() + static_cast<std::ptrdiff_t>(off),
                              x.begin() + static_cast<std::ptrdiff_t>(off + len));
      const auto y = exp_of(part);
      ASSERT_EQ(std::memcmp(y.data(), whole.data() + off, len * sizeof(float)), 0)
          << "offset " << off << " length " << len;
    }
}

TEST(SoftmaxSimd, RowPassesMatchScalarReferences) {
  for (std::int64_t n : {1, 2, 7, 8, 9, 31, 64, 1000, 8192}) {
    SCOPED_TRACE(::testing::Message() << "n = " << n);
    const auto x = test::random_normal<float>(static_cast<std::size_t>(n), 2 + n, 0.0, 4.0);
    const float m = *std::max_element(x.begin(), x.end());
    EXPECT_EQ(simd::row_max(x.data(), n), m);
    // The references take e^ of the same fp32 argument x − m (its rounding is not the exponential's error).
    double ref = 0.0;
    for (float v : x) ref += std::exp(static_cast<double>(v - m));
    EXPECT_NEAR(simd::sum_exp_f64(x.data(), n, m), ref, 2e-7 * ref);  // each term within an ulp
    auto e = x;
    const float s = simd::exp_in_place_sum(e.data(), n, m);
    EXPECT_NEAR(s, ref, 1e-5 * ref);  // fp32 lane sums of up to 1,024 terms
    std::vector<float> y(x.size());
    simd::exp_scaled(y.data(), x.data(), n, m, 0.25f);
    auto p = x, ds = test::random_normal<float>(x.size(), 3 + n);
    const auto ds0 = ds;
    simd::softmax_bwd_row(p.data(), ds.data(), n, m, 0.5f);
    for (std::size_t j = 0; j < x.size(); ++j) {
      const double ej = std::exp(static_cast<double>(x[j] - m));
      ASSERT_NEAR(e[j], ej, 2e-7 * ej) << j;
      ASSERT_NEAR(y[j], 0.25 * ej, 2e-7 * ej) << j;
      ASSERT_NEAR(p[j], ej, 2e-7 * ej) << j;
      ASSERT_EQ(ds[j], p[j] * (ds0[j] - 0.5f)) << j;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Baseline and AVX2 builds: the same bits.

/// Runs fn(outputs) with each supported ISA on fresh copies of `inputs` and expects identical outputs.
void expect_same_bits_on_every_isa(const std::vector<std::vector<float>>& inputs,
                                   const std::function<void(std::vector<std::vector<float>>&)>& fn) {
  if (!cpu_isa_supported(CpuIsa::avx2)) GTEST_SKIP() << "this CPU has no AVX2: only the baseline build runs here";
  IsaGuard guard;
  set_cpu_isa(CpuIsa::baseline);
  auto base = inputs;
  fn(base);
  set_cpu_isa(CpuIsa::avx2);
  auto wide = inputs;
  fn(wide);
  for (std::size_t b = 0; b < base.size(); ++b) EXPECT_TRUE(same_bits(base[b], wide[b])) << "buffer " << b;
}

TEST(CpuIsa, SetAndRestore) {
  IsaGuard guard;
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::baseline));
  const CpuIsa before = set_cpu_isa(CpuIsa::baseline);
  EXPECT_EQ(cpu_isa(), CpuIsa::baseline);
  EXPECT_EQ(set_cpu_isa(before), CpuIsa::baseline);
  EXPECT_EQ(cpu_isa(), before);
  EXPECT_EQ(cpu_isa_name(CpuIsa::avx2), "avx2");
}

TEST(CpuIsa, RowPassesGiveTheSameBitsOnBaselineAndAvx2) {
  const std::int64_t n = 1237;
  const auto x = test::random_normal<float>(n, 4, 0.0, 6.0), d = test::random_normal<float>(n, 5);
  expect_same_bits_on_every_isa({x, x, x, x, d, std::vector<float>(4)}, [&](auto& b) {
    simd::exp(b[0].data(), b[0].data(), n);
    const float m = simd::row_max(b[1].data(), n);
    const double s64 = simd::sum_exp_f64(b[1].data(), n, m);
    const float s32 = simd::exp_in_place_sum(b[1].data(), n, m);
    simd::exp_scaled(b[2].data(), b[2].data(), n, m, 0.125f);
    simd::softmax_bwd_row(b[3].data(), b[4].data(), n, m, 0.5f);
    std::memcpy(&b[5][0], &s32, sizeof s32);
    std::memcpy(&b[5][1], &s64, sizeof s64);
    b[5][3] = m;
  });
}

TEST(CpuIsa, SwiGluGivesTheSameBitsOnBaselineAndAvx2) {
  const std::int64_t t = 7, f = 301;  // a ragged end
  const auto g = test::random_normal<float>(t * f, 6, 0.0, 4.0), u = test::random_normal<float>(t * f, 7);
  const auto d = test::random_normal<float>(t * f, 8);
  const std::vector<float> zero(static_cast<std::size_t>(t * f));
  expect_same_bits_on_every_isa({g, u, d, zero, zero, zero}, [&](auto& b) {
    const Shape s{t, f};
    swiglu_fwd(test::view(b[3], s), test::cview(b[0], s), test::cview(b[1], s), StreamRef::host());
    swiglu_bwd(test::view(b[4], s), test::view(b[5], s), test::cview(b[2], s), test::cview(b[0], s),
               test::cview(b[1], s), StreamRef::host());
  });
  // bf16 goes through the fp32 loops: its bits follow.
  const auto g16 = test::convert<bf16>(g), u16 = test::convert<bf16>(u), d16 = test::convert<bf16>(d);
  std::vector<std::vector<bf16>> outs;
  for (CpuIsa isa : supported_isas()) {
    IsaGuard guard;
    set_cpu_isa(isa);
    std::vector<bf16> o(g16.size()), dg(g16.size()), du(g16.size());
    const Shape s{t, f};
    swiglu_fwd(test::view(o, s), test::cview(g16, s), test::cview(u16, s), StreamRef::host());
    swiglu_bwd(test::view(dg, s), test::view(du, s), test::cview(d16, s), test::cview(g16, s), test::cview(u16, s),
               StreamRef::host());
    o.insert(o.end(), dg.begin(), dg.end());
    o.insert(o.end(), du.begin(), du.end());
    outs.push_back(o);
  }
  for (const auto& o : outs) EXPECT_EQ(std::memcmp(o.data(), outs[0].data(), o.size() * sizeof(bf16)), 0);
}

TEST(CpuIsa, CrossEntropyGivesTheSameBitsOnBaselineAndAvx2) {
  const std::int64_t N = 5, V = 3001;
  auto targets = test::random_ints(N, 9, 0, V - 1);
  targets[1] = -1;
  const CrossEntropyGrad g{.ignore_index = -1, .normaliser = 4.0, .dloss = 1.0};
  const auto logits = test::random_normal<float>(N * V, 10, 0.0, 3.0);
  expect_same_bits_on_every_isa({logits, std::vector<float>(N), std::vector<float>(N * V), std::vector<float>(2)},
                                [&](auto& b) {
                                  const auto r = cross_entropy_fwd_bwd(
                                      test::view(b[1], Shape{N}), test::view(b[2], Shape{N, V}),
                                      test::cview(b[0], Shape{N, V}), test::cview(targets, Shape{N}), g,
                                      StreamRef::host());
                                  std::memcpy(b[3].data(), &r.loss_sum, sizeof r.loss_sum);
                                });
  const auto l16 = test::convert<bf16>(logits);
  std::vector<std::vector<bf16>> grads;
  std::vector<std::vector<float>> losses;
  for (CpuIsa isa : supported_isas()) {
    IsaGuard guard;
    set_cpu_isa(isa);
    std::vector<float> loss(N);
    std::vector<bf16> d(l16.size());
    cross_entropy_fwd_bwd(test::view(loss, Shape{N}), test::view(d, Shape{N, V}), test::cview(l16, Shape{N, V}),
                          test::cview(targets, Shape{N}), g, StreamRef::host());
    grads.push_back(d);
    losses.push_back(loss);
  }
  for (std::size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(std::memcmp(grads[i].data(), grads[0].data(), grads[0].size() * sizeof(bf16)), 0);
    EXPECT_TRUE(same_bits(losses[i], losses[0]));
  }
}

TEST(CpuIsa, AttentionGivesTheSameBitsOnBaselineAndAvx2) {
  const AttentionDims d{.batch = 2, .seq = 77, .heads = 4, .kv_heads = 2, .head_dim = 16};
  const std::int64_t qn = d.batch * d.seq * d.heads * d.head_dim, kn = d.batch * d.seq * d.kv_heads * d.head_dim;
  const Shape qs{d.batch * d.seq, d.heads * d.head_dim}, ks{d.batch * d.seq, d.kv_heads * d.head_dim};
  const Shape ls{d.batch, d.heads, d.seq};
  const auto z = [](std::int64_t n) { return std::vector<float>(static_cast<std::size_t>(n)); };
  expect_same_bits_on_every_isa(
      {test::random_normal<float>(qn, 11), test::random_normal<float>(kn, 12), test::random_normal<float>(kn, 13),
       test::random_normal<float>(qn, 14), z(qn), z(ls.numel()), z(qn), z(kn), z(kn)},
      [&](auto& b) {
        std::vector<std::byte> wf(attention_fwd_workspace_bytes(d, DType::f32));
        std::vector<std::byte> wb(attention_bwd_workspace_bytes(d, DType::f32));
        attention_fwd(test::view(b[4], qs), test::view(b[5], ls), test::cview(b[0], qs), test::cview(b[1], ks),
                      test::cview(b[2], ks), d, wf, StreamRef::host());
        attention_bwd(test::view(b[6], qs), test::view(b[7], ks), test::view(b[8], ks), test::cview(b[3], qs),
                      test::cview(b[0], qs), test::cview(b[1], ks), test::cview(b[2], ks), test::cview(b[4], qs),
                      test::cview(b[5], ls), d, wb, StreamRef::host());
      });
}

// AdamW's fp32 loop is built for both too (vectorised by GCC, with a scalar tail): both builds, and every element
// of either, give the reference's bits.
TEST(CpuIsa, AdamWGivesTheReferenceBitsOnBaselineAndAvx2) {
  const std::int64_t n = 1003;
  const auto p0 = test::random_normal<float>(n, 18), g = test::random_normal<float>(n, 19, 0.0, 0.1);
  const auto m0 = test::random_normal<float>(n, 20, 0.0, 0.01);
  auto v0 = test::random_normal<float>(n, 21, 0.0, 1e-3);
  for (auto& x : v0) x = x * x;
  const AdamWHyper h{.lr = 1e-3, .weight_decay = 0.1, .step = 7, .grad_scale = 0.5};
  auto p_ref = p0, m_ref = m0, v_ref = v0;
  adamw_step_ref<float>(p_ref.data(), m_ref.data(), v_ref.data(), g.data(), n, AdamWConstants<float>::make(h), nullptr);
  for (CpuIsa isa : supported_isas()) {
    IsaGuard guard;
    set_cpu_isa(isa);
    auto p = p0, m = m0, v = v0;
    adamw_step(test::view(p, Shape{n}), test::view(m, Shape{n}), test::view(v, Shape{n}), test::cview(g, Shape{n}), h,
               StreamRef::host());
    EXPECT_TRUE(same_bits(p, p_ref) && same_bits(m, m_ref) && same_bits(v, v_ref)) << cpu_isa_name(isa);
  }
}

// The fp32 SwiGLU loops on their own (the launchers' path for fp32) against the scalar reference formula.
TEST(SwiGluSimd, MatchesTheReferenceFormula) {
  const std::int64_t n = 1001;
  const auto g = test::random_normal<float>(n, 15, 0.0, 5.0), u = test::random_normal<float>(n, 16);
  const auto d = test::random_normal<float>(n, 17);
  std::vector<float> out(n), dg(n), du(n);
  simd::swiglu_fwd(out.data(), g.data(), u.data(), n);
  simd::swiglu_bwd(dg.data(), du.data(), d.data(), g.data(), u.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double gi = g[i], s = 1.0 / (1.0 + std::exp(-gi));
    const double o = gi * s * u[i], dgi = d[i] * u[i] * s * (1.0 + gi * (1.0 - s)), dui = d[i] * gi * s;
    ASSERT_NEAR(out[i], o, 1e-6 * std::fabs(o) + 1e-7) << i;
    ASSERT_NEAR(dg[i], dgi, 1e-6 * std::fabs(dgi) + 2e-6) << i;  // 1 + g(1 − σ) cancels near g ≈ −1.28
    ASSERT_NEAR(du[i], dui, 1e-6 * std::fabs(dui) + 1e-7) << i;
  }
}

}  // namespace
}  // namespace hzp::kernels
