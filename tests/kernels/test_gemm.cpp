// Tests of the GEMM family: the OpenBLAS launcher and the triple-loop reference against a double
// truth for every transpose combination and dtype combination, the linear layer's gradients (built
// from gemm calls) against finite differences, BLAS beta semantics, workspace sizing, bad arguments.
#include <cmath>
#include <cstddef>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gemm/gemm_ref.hpp"
#include "hzp/kernels/gemm.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

Shape stored_shape(std::int64_t rows, std::int64_t cols, bool trans) {
  return trans ? Shape{cols, rows} : Shape{rows, cols};
}

// Runs the launcher with a workspace of exactly the size it asks for.
void run_gemm(TensorView c, ConstTensorView a, ConstTensorView b, bool ta, bool tb, float alpha, float beta) {
  std::vector<std::byte> ws(gemm_workspace_bytes(c, a, b, ta, tb));
  gemm(c, a, b, ta, tb, alpha, beta, ws, kHost);
}

// The exact result (in double, from the operands' stored values) and, per element, the magnitude
// alpha·Σ_p |a||b| + |beta·c| that bounds the rounding error of a K-term accumulation.
struct Truth {
  std::vector<double> value, magnitude;
};

template <typename T, typename TC>
Truth truth_of(const std::vector<T>& a, const std::vector<T>& b, const std::vector<TC>& c0, std::int64_t m,
               std::int64_t n, std::int64_t k, bool ta, bool tb, double alpha, double beta) {
  auto ad = test::convert<double>(a), bd = test::convert<double>(b);
  Truth t{test::convert<double>(c0), test::convert<double>(c0)};
  gemm_ref<double>(t.value.data(), ad.data(), bd.data(), m, n, k, ta, tb, alpha, beta);
  for (auto& v : ad) v = std::abs(v);
  for (auto& v : bd) v = std::abs(v);
  for (auto& v : t.magnitude) v = std::abs(v);
  gemm_ref<double>(t.magnitude.data(), ad.data(), bd.data(), m, n, k, ta, tb, std::abs(alpha), std::abs(beta));
  return t;
}

// |c_i − truth_i| <= rel·|truth_i| + acc·magnitude_i: `rel` is the output's rounding (2^-8 for a bf16
// store, 0 otherwise) and `acc` the accumulation precision (a few K·u of the compute type).
template <typename TC>
::testing::AssertionResult within_bound(const std::vector<TC>& c, const Truth& t, double rel, double acc) {
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double got = test::to_double(c[i]);
    const double bound = rel * std::abs(t.value[i]) + acc * t.magnitude[i];
    if (!(std::abs(got - t.value[i]) <= bound))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got << ", truth " << t.value[i]
                                           << ", |error| " << std::abs(got - t.value[i]) << " > bound " << bound;
  }
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------------------------------------
// Launcher and reference vs truth, every transpose combination (NN, NT, TN used by the model; TT too).

class GemmTranspose : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  // Odd sizes catch leading-dimension mistakes that square shapes hide.
  static constexpr std::int64_t m = 7, n = 5, k = 13;

  template <typename T, typename TC>
  void check(double rel, double acc, float alpha, float beta) {
    const auto [ta, tb] = GetParam();
    const auto a = test::random_uniform<T>(m * k, 11);
    const auto b = test::random_uniform<T>(k * n, 12);
    const auto c0 = test::random_uniform<TC>(m * n, 13);
    const Truth truth = truth_of(a, b, c0, m, n, k, ta, tb, alpha, beta);

    auto c = c0;
    run_gemm(view(c, {m, n}), cview(a, stored_shape(m, k, ta)), cview(b, stored_shape(k, n, tb)), ta, tb, alpha,
             beta);
    EXPECT_TRUE(within_bound(c, truth, rel, acc)) << "launcher";

    auto cr = c0;
    gemm_ref<T, TC>(cr.data(), a.data(), b.data(), m, n, k, ta, tb, alpha, beta);
    EXPECT_TRUE(within_bound(cr, truth, rel, acc)) << "reference";
  }
};

// Accumulation bound: K terms in a type with unit roundoff u give |error| <= K·u·Σ|a||b| (γ_K); the
// factor 2 leaves room for the alpha/beta operations.
constexpr double kU32 = 0x1p-24, kU64 = 0x1p-53, kUbf16 = 0x1p-8;
constexpr double kGamma32 = 2.0 * (13 + 2) * kU32, kGamma64 = 2.0 * (13 + 2) * kU64;

TEST_P(GemmTranspose, Fp64) { check<double, double>(0.0, kGamma64, 0.75f, 0.5f); }
TEST_P(GemmTranspose, Fp32) { check<float, float>(0.0, kGamma32, 0.75f, 0.5f); }
// bf16 out: the fp32 result is rounded once to bf16, so add bf16's unit roundoff 2^-8 relative.
TEST_P(GemmTranspose, Bf16ToBf16) { check<bf16, bf16>(kUbf16, 2 * kGamma32, 0.75f, 0.5f); }
TEST_P(GemmTranspose, Bf16ToFp32) { check<bf16, float>(0.0, kGamma32, 1.0f, 1.0f); }

INSTANTIATE_TEST_SUITE_P(AllOps, GemmTranspose,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "T" : "N") +
                                  (std::get<1>(info.param) ? "T" : "N");
                         });

// ------------------------------------------------------------------------------------------------
// The linear layer y = x·Wᵀ and its gradients dx = dy·W (NN) and dW = dyᵀ·x (TN), all through the
// launcher in fp64, against central differences of L = Σ dy ⊙ y.

TEST(Gemm, LinearLayerGradientsMatchFiniteDifferences) {
  const std::int64_t tokens = 6, in = 5, out = 4;
  auto x = test::random_uniform<double>(tokens * in, 1);
  auto w = test::random_uniform<double>(out * in, 2);
  const auto dy = test::random_uniform<double>(tokens * out, 3);
  std::vector<double> y(tokens * out), dx(tokens * in), dw(out * in);
  auto loss = [&] {
    run_gemm(view(y, {tokens, out}), cview(x, {tokens, in}), cview(w, {out, in}), false, true, 1.0f, 0.0f);
    return test::dot(dy, y);
  };
  run_gemm(view(dx, {tokens, in}), cview(dy, {tokens, out}), cview(w, {out, in}), false, false, 1.0f, 0.0f);
  run_gemm(view(dw, {out, in}), cview(dy, {tokens, out}), cview(x, {tokens, in}), true, false, 1.0f, 0.0f);
  EXPECT_TRUE(test::check_gradient("x", x, dx, loss));
  EXPECT_TRUE(test::check_gradient("W", w, dw, loss));
}

// Weight gradients accumulate across micro-batches with beta = 1 into an fp32 buffer.
TEST(Gemm, WeightGradientAccumulatesWithBetaOne) {
  const std::int64_t tokens = 8, in = 6, out = 3;
  const auto dy = test::random_uniform<bf16>(tokens * out, 4);
  const auto x = test::random_uniform<bf16>(tokens * in, 5);
  std::vector<float> once(out * in), twice(out * in);
  run_gemm(view(once, {out, in}), cview(dy, {tokens, out}), cview(x, {tokens, in}), true, false, 1.0f, 0.0f);
  run_gemm(view(twice, {out, in}), cview(dy, {tokens, out}), cview(x, {tokens, in}), true, false, 1.0f, 0.0f);
  run_gemm(view(twice, {out, in}), cview(dy, {tokens, out}), cview(x, {tokens, in}), true, false, 1.0f, 1.0f);
  // Same terms, different association: equal to fp32 rounding of a K-term sum.
  std::vector<double> expect(once.size());
  for (std::size_t i = 0; i < once.size(); ++i) expect[i] = 2.0 * once[i];
  EXPECT_TRUE(test::all_close(twice, expect, 4 * tokens * 0x1p-24, 1e-6));
}

// Model-sized shape (tokens × hidden × LM head with a vocabulary that is a multiple of nothing).
TEST(Gemm, LmHeadShapeBf16MatchesTruth) {
  const std::int64_t tokens = 33, hidden = 48, vocab = 67;
  const auto x = test::random_uniform<bf16>(tokens * hidden, 6);
  const auto w = test::random_uniform<bf16>(vocab * hidden, 7);
  std::vector<bf16> logits(tokens * vocab);
  run_gemm(view(logits, {tokens, vocab}), cview(x, {tokens, hidden}), cview(w, {vocab, hidden}), false, true, 1.0f,
           0.0f);
  const Truth t = truth_of(x, w, logits, tokens, vocab, hidden, false, true, 1.0, 0.0);
  EXPECT_TRUE(within_bound(logits, t, kUbf16, 2.0 * (hidden + 2) * kU32));
}

// BLAS semantics: with beta = 0, C is write-only, so NaN garbage in it must not leak into the result.
TEST(Gemm, BetaZeroDoesNotReadC) {
  const std::int64_t m = 3, n = 4, k = 2;
  const auto a32 = test::random_uniform<float>(m * k, 8), b32 = test::random_uniform<float>(k * n, 9);
  const auto a16 = test::convert<bf16>(a32), b16 = test::convert<bf16>(b32);
  std::vector<float> c32(m * n, std::numeric_limits<float>::quiet_NaN());
  std::vector<bf16> c16(m * n, bf16(std::numeric_limits<float>::quiet_NaN()));
  run_gemm(view(c32, {m, n}), cview(a32, {m, k}), cview(b32, {k, n}), false, false, 1.0f, 0.0f);
  run_gemm(view(c16, {m, n}), cview(a16, {m, k}), cview(b16, {k, n}), false, false, 1.0f, 0.0f);
  for (std::size_t i = 0; i < c32.size(); ++i) {
    EXPECT_FALSE(std::isnan(c32[i])) << i;
    EXPECT_FALSE(std::isnan(c16[i].to_float())) << i;
  }
  std::vector<float> cr(m * n, std::numeric_limits<float>::quiet_NaN());
  gemm_ref<float>(cr.data(), a32.data(), b32.data(), m, n, k, false, false, 1.0f, 0.0f);
  for (float v : cr) EXPECT_FALSE(std::isnan(v));
}

// Degenerate-but-valid sizes: a single token (M = 1), a rank-1 product (K = 1), a single output.
TEST(Gemm, SizeOneDimensions) {
  for (auto [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 9, 4}, {5, 3, 1}, {1, 1, 1}}) {
    const auto a = test::random_uniform<float>(m * k, 10), b = test::random_uniform<float>(n * k, 11);
    std::vector<float> c(m * n), cr(m * n);
    run_gemm(view(c, {m, n}), cview(a, {m, k}), cview(b, {n, k}), false, true, 1.0f, 0.0f);
    gemm_ref<float>(cr.data(), a.data(), b.data(), m, n, k, false, true, 1.0f, 0.0f);
    EXPECT_TRUE(test::all_close(c, cr, 1e-6, 1e-6)) << m << "x" << n << "x" << k;
  }
}

// ------------------------------------------------------------------------------------------------
// Workspace.

TEST(Gemm, WorkspaceSizes) {
  std::vector<float> f(1);
  const ConstTensorView a32(nullptr, {4, 3}, DType::f32), b32(nullptr, {3, 5}, DType::f32);
  const ConstTensorView a16(nullptr, {4, 3}, DType::bf16), b16(nullptr, {3, 5}, DType::bf16);
  EXPECT_EQ(gemm_workspace_bytes(ConstTensorView(nullptr, {4, 5}, DType::f32), a32, b32, false, false), 0u);
  EXPECT_EQ(gemm_workspace_bytes(ConstTensorView(nullptr, {4, 5}, DType::f64),
                                 ConstTensorView(nullptr, {4, 3}, DType::f64),
                                 ConstTensorView(nullptr, {3, 5}, DType::f64), false, false),
            0u);
  const std::size_t to32 = gemm_workspace_bytes(ConstTensorView(nullptr, {4, 5}, DType::f32), a16, b16, false, false);
  const std::size_t to16 = gemm_workspace_bytes(ConstTensorView(nullptr, {4, 5}, DType::bf16), a16, b16, false, false);
  EXPECT_GE(to32, (12u + 15u) * sizeof(float));
  EXPECT_GE(to16, to32 + 20u * sizeof(float));  // bf16 C is staged in fp32 to round it once
}

TEST(Gemm, UnalignedWorkspaceIsAccepted) {
  const std::int64_t m = 5, n = 6, k = 7;
  const auto a = test::random_uniform<bf16>(m * k, 12), b = test::random_uniform<bf16>(k * n, 13);
  std::vector<bf16> c(m * n), expect(m * n);
  const std::size_t need = gemm_workspace_bytes(view(c, {m, n}), cview(a, {m, k}), cview(b, {k, n}), false, false);
  std::vector<std::byte> ws(need + 1);
  gemm(view(c, {m, n}), cview(a, {m, k}), cview(b, {k, n}), false, false, 1.0f, 0.0f,
       std::span<std::byte>(ws).subspan(1), kHost);
  run_gemm(view(expect, {m, n}), cview(a, {m, k}), cview(b, {k, n}), false, false, 1.0f, 0.0f);
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].bits, expect[i].bits) << i;
}

// ------------------------------------------------------------------------------------------------
// Bad arguments: each message names the kernel, the argument and the dimensions.

TEST(Gemm, RejectsBadArguments) {
  std::vector<float> buf(64);
  std::vector<bf16> hbuf(64);
  auto f = [&](Shape s) { return view(buf, s); };
  auto h = [&](Shape s) { return view(hbuf, s); };
  auto call = [](TensorView c, ConstTensorView a, ConstTensorView b, bool ta, bool tb,
                 std::span<std::byte> ws = {}) { return [=] { gemm(c, a, b, ta, tb, 1.0f, 0.0f, ws, kHost); }; };

  EXPECT_TRUE(test::throws_with(call(f({4, 6}), f({4, 3}), f({5, 6}), false, false),
                                {"gemm: inner dimensions differ", "op(a) is [4, 3]", "op(b) is [5, 6]"}));
  EXPECT_TRUE(test::throws_with(call(f({4, 6}), f({3, 4}), f({6, 5}), true, true),
                                {"op(a) is [4, 3]", "a [3, 4], trans_a=1", "op(b) is [5, 6]", "trans_b=1"}));
  EXPECT_TRUE(test::throws_with(call(f({4, 4}), f({4, 3}), f({3, 6}), false, false),
                                {"gemm: c has shape [4, 4], expected [4, 6]"}));
  EXPECT_TRUE(test::throws_with(call(f({4, 6}), f({2, 4, 3}), f({3, 6}), false, false),
                                {"gemm: a must be 2-D, got shape [2, 4, 3]"}));
  EXPECT_TRUE(test::throws_with(call(f({4, 6}), f({4, 0}), f({0, 6}), false, false),
                                {"gemm: K (inner dimension) = 0 must be positive"}));
  EXPECT_TRUE(test::throws_with(call(f({0, 6}), f({0, 3}), f({3, 6}), false, false), {"gemm: M", "= 0"}));
  EXPECT_TRUE(test::throws_with(call(f({4, 6}), h({4, 3}), f({3, 6}), false, false),
                                {"gemm: a has dtype bf16 but b has dtype fp32"}));
  EXPECT_TRUE(test::throws_with(call(h({4, 6}), f({4, 3}), f({3, 6}), false, false),
                                {"gemm: unsupported dtypes a,b=fp32 c=bf16"}));
  std::vector<std::byte> small(16);
  EXPECT_TRUE(test::throws_with(call(h({4, 6}), h({4, 3}), h({3, 6}), false, false, small),
                                {"gemm: workspace of 16 bytes is smaller than"}));
  EXPECT_TRUE(test::throws_with(call(h({4, 6}), h({4, 3}), h({3, 6}), false, false),
                                {"gemm: workspace of 0 bytes"}));
}

// Host tensors with a CUDA stream are refused before any CUDA call (the CUDA twin is tested on a GPU).
TEST(Gemm, TensorsOnAnotherDeviceThanTheStreamAreRefused) {
  std::vector<float> a(4), b(4), c(4);
  const StreamRef cuda = StreamRef::wrap(Device::cuda(0), nullptr);
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { gemm(view(c, {2, 2}), cview(a, {2, 2}), cview(b, {2, 2}), false, false, 1.0f, 0.0f, {}, cuda); },
      {"gemm", "a", "is on cpu but the stream is on cuda:0"}));
}

// CPU GEMMs never load cuBLASLt: a CUDA build opens it on the first GEMM on a CUDA stream only
// (kernels/gemm/cublaslt_library.hpp). Linked, it cost every process ~200 MB and up to a second at start.
TEST(Gemm, CpuGemmsDoNotLoadCublasLt) {
  std::vector<float> a(64 * 32, 0.5f), b(32 * 16, 0.25f), c(64 * 16, 0.f);
  gemm(view(c, {64, 16}), cview(a, {64, 32}), cview(b, {32, 16}), false, false, 1.f, 0.f, {},
       StreamRef::host());
  EXPECT_FLOAT_EQ(c[0], 32 * 0.5f * 0.25f);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) EXPECT_EQ(line.find("libcublasLt"), std::string::npos) << line;
}

}  // namespace
}  // namespace hzp::kernels
