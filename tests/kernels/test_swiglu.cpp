// Tests of the SwiGLU family: forward against silu(g)·u in double, backward (dgate, dup) against
// finite differences, fp32 and bf16 against double, saturation at large |gate| without NaN, the
// documented aliasing (dgate over gate, dup over up), and rejected shapes.
#include <cmath>
#include <vector>

#include "hzp/kernels/swiglu.hpp"
#include "kernel_test_util.hpp"
#include "swiglu/swiglu_ref.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

double silu(double g) { return g / (1.0 + std::exp(-g)); }

TEST(SwiGlu, ForwardMatchesFormula) {
  const std::int64_t t = 6, f = 10;
  const auto gate = test::random_uniform<double>(t * f, 1, -6, 6), up = test::random_uniform<double>(t * f, 2);
  std::vector<double> out(t * f), expect(t * f);
  swiglu_fwd(view(out, {t, f}), cview(gate, {t, f}), cview(up, {t, f}), kHost);
  for (std::size_t i = 0; i < out.size(); ++i) expect[i] = silu(gate[i]) * up[i];
  EXPECT_TRUE(test::all_close(out, expect, 1e-15, 1e-16));
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  const std::int64_t t = 5, f = 7;
  auto gate = test::random_uniform<double>(t * f, 3, -5, 5), up = test::random_uniform<double>(t * f, 4);
  const auto dout = test::random_uniform<double>(t * f, 5);
  std::vector<double> out(t * f), dgate(t * f), dup(t * f);
  swiglu_bwd(view(dgate, {t, f}), view(dup, {t, f}), cview(dout, {t, f}), cview(gate, {t, f}), cview(up, {t, f}),
             kHost);
  auto loss = [&] {
    swiglu_fwd(view(out, {t, f}), cview(gate, {t, f}), cview(up, {t, f}), kHost);
    return test::dot(dout, out);
  };
  EXPECT_TRUE(test::check_gradient("gate", gate, dgate, loss));
  EXPECT_TRUE(test::check_gradient("up", up, dup, loss));
}

// fp32: exp, one division and three products: a few ulps relative (1e-6). bf16: the fp32 result
// rounded once to bf16, 2^-8 relative on top. dgate's factor 1 + g·(1 − σ(g)) cancels near
// g ≈ −1.28, where fp32 leaves a few 2^-24·|g·dout·up| absolute (|dout·up| ≲ 16 here): atol 2e-6.
TEST(SwiGlu, Fp32AndBf16MatchDouble) {
  const std::int64_t t = 16, f = 48;
  const auto g32 = test::random_normal<float>(t * f, 6, 0, 3), u32 = test::random_normal<float>(t * f, 7);
  const auto d32 = test::random_normal<float>(t * f, 8);
  const auto g16 = test::convert<bf16>(g32), u16 = test::convert<bf16>(u32), d16 = test::convert<bf16>(d32);

  auto truth = [&](const auto& g, const auto& u, const auto& d) {
    const auto gd = test::convert<double>(g), ud = test::convert<double>(u), dd = test::convert<double>(d);
    std::vector<double> out(t * f), dg(t * f), du(t * f);
    swiglu_fwd_ref(out.data(), gd.data(), ud.data(), t * f);
    swiglu_bwd_ref(dg.data(), du.data(), dd.data(), gd.data(), ud.data(), t * f);
    return std::tuple{out, dg, du};
  };
  {
    std::vector<float> out(t * f), dg(t * f), du(t * f);
    swiglu_fwd(view(out, {t, f}), cview(g32, {t, f}), cview(u32, {t, f}), kHost);
    swiglu_bwd(view(dg, {t, f}), view(du, {t, f}), cview(d32, {t, f}), cview(g32, {t, f}), cview(u32, {t, f}), kHost);
    const auto [eo, eg, eu] = truth(g32, u32, d32);
    EXPECT_TRUE(test::all_close(out, eo, 1e-6, 1e-7));
    EXPECT_TRUE(test::all_close(dg, eg, 1e-6, 2e-6));
    EXPECT_TRUE(test::all_close(du, eu, 1e-6, 1e-7));
  }
  {
    std::vector<bf16> out(t * f), dg(t * f), du(t * f);
    swiglu_fwd(view(out, {t, f}), cview(g16, {t, f}), cview(u16, {t, f}), kHost);
    swiglu_bwd(view(dg, {t, f}), view(du, {t, f}), cview(d16, {t, f}), cview(g16, {t, f}), cview(u16, {t, f}), kHost);
    const auto [eo, eg, eu] = truth(g16, u16, d16);
    EXPECT_TRUE(test::all_close(out, eo, 0x1p-8 + 1e-6, 1e-6));
    EXPECT_TRUE(test::all_close(dg, eg, 0x1p-8 + 1e-6, 2e-6));
    EXPECT_TRUE(test::all_close(du, eu, 0x1p-8 + 1e-6, 1e-6));
  }
}

// exp(-g) overflows for g << 0: σ must go to 0 (silu → −0), not NaN; for g >> 0, silu(g) = g.
TEST(SwiGlu, LargeGateSaturatesWithoutNan) {
  const std::vector<float> gate{-1000.0f, -100.0f, 100.0f, 1000.0f}, up(4, 2.0f), dout(4, 1.0f);
  std::vector<float> out(4), dg(4), du(4);
  swiglu_fwd(view(out, {1, 4}), cview(gate, {1, 4}), cview(up, {1, 4}), kHost);
  swiglu_bwd(view(dg, {1, 4}), view(du, {1, 4}), cview(dout, {1, 4}), cview(gate, {1, 4}), cview(up, {1, 4}), kHost);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.0f, 1e-38f);
  EXPECT_EQ(out[2], 200.0f);
  EXPECT_EQ(out[3], 2000.0f);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(dg[i]) && std::isfinite(du[i])) << i;
  }
  EXPECT_EQ(dg[3], 2.0f);   // d silu/dg → 1
  EXPECT_EQ(dg[0], 0.0f);   // → 0
}

// The MLP backward can write dgate over gate and dup over up (both saved activations die there).
TEST(SwiGlu, BackwardMayOverwriteGateAndUp) {
  const std::int64_t t = 3, f = 8;
  auto gate = test::random_uniform<float>(t * f, 9, -4, 4), up = test::random_uniform<float>(t * f, 10);
  const auto dout = test::random_uniform<float>(t * f, 11);
  std::vector<float> dg(t * f), du(t * f);
  swiglu_bwd(view(dg, {t, f}), view(du, {t, f}), cview(dout, {t, f}), cview(gate, {t, f}), cview(up, {t, f}), kHost);
  swiglu_bwd(view(gate, {t, f}), view(up, {t, f}), cview(dout, {t, f}), cview(gate, {t, f}), cview(up, {t, f}),
             kHost);
  EXPECT_EQ(gate, dg);
  EXPECT_EQ(up, du);
}

TEST(SwiGlu, RejectsBadShapes) {
  std::vector<float> f(256);
  std::vector<bf16> h(256);
  auto v = [&](Shape s) { return view(f, s); };
  EXPECT_TRUE(test::throws_with([&] { swiglu_fwd(v({4, 8}), v({4, 8}), v({4, 9}), kHost); },
                                {"swiglu_fwd: up has shape [4, 9], expected [4, 8]"}));
  EXPECT_TRUE(test::throws_with([&] { swiglu_fwd(v({4, 6}), v({4, 8}), v({4, 8}), kHost); },
                                {"swiglu_fwd: out has shape [4, 6], expected [4, 8]"}));
  EXPECT_TRUE(test::throws_with([&] { swiglu_fwd(v({32}), v({32}), v({32}), kHost); },
                                {"swiglu_fwd: gate must be 2-D [tokens, F], got shape [32]"}));
  EXPECT_TRUE(test::throws_with([&] { swiglu_fwd(v({4, 0}), v({4, 0}), v({4, 0}), kHost); },
                                {"swiglu_fwd: F (columns of gate) = 0 must be positive"}));
  EXPECT_TRUE(test::throws_with(
      [&] { swiglu_bwd(v({4, 8}), v({4, 8}), v({4, 8}), v({4, 8}), cview(h, {4, 8}), kHost); },
      {"swiglu_bwd: up has dtype bf16, expected fp32"}));
  EXPECT_TRUE(test::throws_with(
      [&] { swiglu_bwd(v({4, 8}), v({2, 8}), v({4, 8}), v({4, 8}), v({4, 8}), kHost); },
      {"swiglu_bwd: dup has shape [2, 8], expected [4, 8]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { swiglu_fwd(v({4, 8}), v({4, 8}), v({4, 8}), StreamRef::wrap(Device::cuda(0), nullptr)); },
      {"swiglu_fwd", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
