// Tests of causal grouped-query attention (kernels/attention): the launcher in double against an
// independent full-matrix softmax(QKᵀ/√D + mask)·V written here, backward against central differences,
// fp32 and bf16 against double, bitwise causality, edge cases (T = 1, one head, GQA 1 and 8,
// D ≠ hidden/H, the [tokens, H·D] layout) and the error messages of bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/scalar.hpp"
#include "dense_attention.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::convert;
using test::cview;
using test::view;

using test::kv_elems;
using test::kv_shape;
using test::lse_shape;
using test::q_elems;
using test::q_shape;

template <typename T>
struct Inputs {
  std::vector<T> q, k, v, dout;
};

/// Random inputs generated in double and rounded to T, so every precision sees "the same" problem.
template <typename T>
Inputs<T> make_inputs(const AttentionDims& d, std::uint64_t seed) {
  return {test::random_uniform<T>(q_elems(d), seed), test::random_uniform<T>(kv_elems(d), seed + 1),
          test::random_uniform<T>(kv_elems(d), seed + 2), test::random_uniform<T>(q_elems(d), seed + 3)};
}

template <typename T>
struct Forward {
  std::vector<T> out;
  std::vector<acc_t<T>> lse;
};

template <typename T>
Forward<T> run_fwd(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v, const AttentionDims& d) {
  Forward<T> f{std::vector<T>(q_elems(d)), std::vector<acc_t<T>>(static_cast<std::size_t>(d.batch * d.heads * d.seq))};
  std::vector<std::byte> ws(attention_fwd_workspace_bytes(d, dtype_of_v<T>));
  attention_fwd(view(f.out, q_shape(d)), view(f.lse, lse_shape(d)), cview(q, q_shape(d)), cview(k, kv_shape(d)),
                cview(v, kv_shape(d)), d, ws, StreamRef::host());
  return f;
}

template <typename T>
struct Backward {
  std::vector<T> dq, dk, dv;
};

template <typename T>
Backward<T> run_bwd(const Inputs<T>& in, const Forward<T>& f, const AttentionDims& d) {
  Backward<T> g{std::vector<T>(q_elems(d)), std::vector<T>(kv_elems(d)), std::vector<T>(kv_elems(d))};
  std::vector<std::byte> ws(attention_bwd_workspace_bytes(d, dtype_of_v<T>));
  attention_bwd(view(g.dq, q_shape(d)), view(g.dk, kv_shape(d)), view(g.dv, kv_shape(d)), cview(in.dout, q_shape(d)),
                cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)), cview(in.v, kv_shape(d)), cview(f.out, q_shape(d)),
                cview(f.lse, lse_shape(d)), d, ws, StreamRef::host());
  return g;
}

/// The textbook definition, independent of the kernel (dense_attention.hpp).
Forward<double> naive_attention(const Inputs<double>& in, const AttentionDims& d) {
  test::DenseAttention f = test::dense_attention(in.q, in.k, in.v, d);
  return {std::move(f.out), std::move(f.lse)};
}

// Shapes covering the edge cases of the issue: GQA ratios 1, 2 and 8, one head, T = 1, and head_dim
// chosen independently of any hidden size (D = 5 with H = 4 would be hidden 20; D = 12 with H = 3 ...).
const AttentionDims kShapes[] = {
    {2, 7, 4, 2, 5},   // GQA ratio 2, odd D
    {1, 6, 3, 3, 12},  // ratio 1 (plain MHA), D ≠ hidden/H for any hidden of interest
    {1, 5, 8, 1, 4},   // ratio 8 (multi-query)
    {2, 1, 2, 1, 3},   // T = 1
    {1, 9, 1, 1, 16},  // one head, D of 16 exercises the 8-lane dot's full blocks
};

TEST(Attention, DoubleMatchesNaiveFullMatrixReference) {
  for (const AttentionDims& d : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << d.batch << " T=" << d.seq << " H=" << d.heads << " KV=" << d.kv_heads
                                      << " D=" << d.head_dim);
    const auto in = make_inputs<double>(d, 11);
    const auto got = run_fwd(in.q, in.k, in.v, d);
    const auto want = naive_attention(in, d);
    EXPECT_TRUE(test::all_close(got.out, want.out, 1e-12, 1e-13));
    EXPECT_TRUE(test::all_close(got.lse, want.lse, 1e-12, 1e-13));
  }
}

TEST(Attention, BackwardMatchesFiniteDifferencesInDouble) {
  for (const AttentionDims& d : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << d.batch << " T=" << d.seq << " H=" << d.heads << " KV=" << d.kv_heads
                                      << " D=" << d.head_dim);
    auto in = make_inputs<double>(d, 21);
    const auto f = run_fwd(in.q, in.k, in.v, d);
    const auto g = run_bwd(in, f, d);
    // L = <dout, out(q, k, v)>: its gradient is what attention_bwd computes when handed dout.
    const auto loss = [&] { return test::dot(in.dout, run_fwd(in.q, in.k, in.v, d).out); };
    test::FdOptions opt;
    opt.max_samples = 200;
    // With one key (T = 1) dq and dk are zero in exact arithmetic; what the kernel returns is the difference of
    // two roundings of dout·v (a BLAS GEMM and a plain dot, which FMA kernels round differently), ~1e-17 here.
    opt.min_scale = 1e-9;
    EXPECT_TRUE(test::check_gradient("dq", in.q, g.dq, loss, opt));
    EXPECT_TRUE(test::check_gradient("dk", in.k, g.dk, loss, opt));
    EXPECT_TRUE(test::check_gradient("dv", in.v, g.dv, loss, opt));
  }
}

TEST(Attention, Fp32MatchesDouble) {
  const AttentionDims d{2, 33, 8, 2, 24};
  const auto ind = make_inputs<double>(d, 31);
  const Inputs<float> inf{convert<float>(ind.q), convert<float>(ind.k), convert<float>(ind.v),
                          convert<float>(ind.dout)};
  // The double oracle runs on the fp32-rounded inputs, so only the kernel's arithmetic is compared.
  const Inputs<double> ref{convert<double>(inf.q), convert<double>(inf.k), convert<double>(inf.v),
                           convert<double>(inf.dout)};
  const auto f32 = run_fwd(inf.q, inf.k, inf.v, d);
  const auto f64 = run_fwd(ref.q, ref.k, ref.v, d);
  EXPECT_TRUE(test::all_close(f32.out, f64.out, 1e-5, 1e-6));
  EXPECT_TRUE(test::all_close(f32.lse, f64.lse, 1e-6, 1e-6));
  const auto g32 = run_bwd(inf, f32, d);
  const auto g64 = run_bwd(ref, f64, d);
  EXPECT_TRUE(test::rel_l2_close(g32.dq, g64.dq, 1e-5));
  EXPECT_TRUE(test::rel_l2_close(g32.dk, g64.dk, 1e-5));
  EXPECT_TRUE(test::rel_l2_close(g32.dv, g64.dv, 1e-5));
}

TEST(Attention, Bf16MatchesDoubleOnTheSameRoundedInputs) {
  const AttentionDims d{2, 33, 8, 2, 24};
  const auto ind = make_inputs<double>(d, 41);
  const Inputs<bf16> inb{convert<bf16>(ind.q), convert<bf16>(ind.k), convert<bf16>(ind.v), convert<bf16>(ind.dout)};
  const Inputs<double> ref{convert<double>(inb.q), convert<double>(inb.k), convert<double>(inb.v),
                           convert<double>(inb.dout)};
  const auto fb = run_fwd(inb.q, inb.k, inb.v, d);
  const auto fd = run_fwd(ref.q, ref.k, ref.v, d);
  // fp32 compute, one rounding to bf16 (relative 2^-9) on store.
  EXPECT_TRUE(test::all_close(fb.out, fd.out, 1.0 / 256, 1e-3));
  EXPECT_TRUE(test::all_close(fb.lse, fd.lse, 1e-6, 1e-6));
  // The backward reads the stored bf16 `out` (Δ = dout·out); give the oracle the same values.
  const Forward<double> fd_same_out{convert<double>(fb.out), fd.lse};
  const auto gb = run_bwd(inb, fb, d);
  const auto gd = run_bwd(ref, fd_same_out, d);
  EXPECT_TRUE(test::rel_l2_close(gb.dq, gd.dq, 6e-3));
  EXPECT_TRUE(test::rel_l2_close(gb.dk, gd.dk, 6e-3));
  EXPECT_TRUE(test::rel_l2_close(gb.dv, gd.dv, 6e-3));
}

/// Perturbs k and v at every position > t and checks that out and lse at positions <= t keep their bits.
template <typename T>
void expect_causal_bitwise(const AttentionDims& d, std::int64_t t) {
  auto in = make_inputs<T>(d, 51);
  const auto before = run_fwd(in.q, in.k, in.v, d);
  const std::size_t row = static_cast<std::size_t>(d.kv_heads * d.head_dim);
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t j = t + 1; j < d.seq; ++j)
      for (std::size_t e = 0; e < row; ++e) {
        const std::size_t i = static_cast<std::size_t>(b * d.seq + j) * row + e;
        in.k[i] = test::from_double<T>(test::to_double(in.k[i]) * -3.0 + 0.5);
        in.v[i] = test::from_double<T>(test::to_double(in.v[i]) + 10.0);
      }
  const auto after = run_fwd(in.q, in.k, in.v, d);
  const std::size_t qrow = static_cast<std::size_t>(d.heads * d.head_dim);
  bool later_changed = false;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    for (std::int64_t i = 0; i < d.seq; ++i) {
      const std::size_t off = static_cast<std::size_t>(b * d.seq + i) * qrow;
      const bool same = std::memcmp(&before.out[off], &after.out[off], qrow * sizeof(T)) == 0;
      if (i <= t) {
        EXPECT_TRUE(same) << "out changed at batch " << b << " position " << i << " <= t = " << t;
      }
      later_changed |= i > t && !same;
      for (std::int64_t h = 0; h < d.heads; ++h) {
        const std::size_t l = static_cast<std::size_t>((b * d.heads + h) * d.seq + i);
        if (i <= t) {
          EXPECT_EQ(std::memcmp(&before.lse[l], &after.lse[l], sizeof(acc_t<T>)), 0)
              << "lse changed at batch " << b << " head " << h << " position " << i;
        }
      }
    }
  }
  EXPECT_TRUE(later_changed) << "the perturbation did not reach positions > t: the test is vacuous";
}

TEST(Attention, PerturbingFutureKeysAndValuesLeavesEarlierOutputsBitwiseUnchanged) {
  expect_causal_bitwise<float>({2, 11, 4, 2, 8}, 4);
  expect_causal_bitwise<bf16>({2, 11, 4, 2, 8}, 6);
  expect_causal_bitwise<double>({1, 6, 8, 1, 5}, 0);
}

TEST(Attention, SingleTokenOutputEqualsValueAndGradientsAreExact) {
  const AttentionDims d{3, 1, 4, 2, 6};
  const auto in = make_inputs<float>(d, 61);
  const auto f = run_fwd(in.q, in.k, in.v, d);
  const auto g = run_bwd(in, f, d);
  // One key: its probability is exactly 1, so out = v of the head's group bit for bit and dv sums dout over the
  // group. dq = dk = 0 in exact arithmetic (ds = p·(dout·v − dout·out) with out == v), but dout·v is a BLAS GEMM
  // and dout·out a plain dot: with FMA kernels (AMD EPYC's OpenBLAS cores) they differ in the last bit, so
  // dq and dk are zero up to the rounding of one dot product of O(1) terms.
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t h = 0; h < d.heads; ++h)
      for (std::int64_t e = 0; e < d.head_dim; ++e) {
        const std::int64_t g_ = h / d.group();
        EXPECT_EQ(f.out[static_cast<std::size_t>((b * d.heads + h) * d.head_dim + e)],
                  in.v[static_cast<std::size_t>((b * d.kv_heads + g_) * d.head_dim + e)]);
        EXPECT_NEAR(g.dq[static_cast<std::size_t>((b * d.heads + h) * d.head_dim + e)], 0.0f, 1e-6f);
      }
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t g_ = 0; g_ < d.kv_heads; ++g_)
      for (std::int64_t e = 0; e < d.head_dim; ++e) {
        const std::size_t kv = static_cast<std::size_t>((b * d.kv_heads + g_) * d.head_dim + e);
        float want = 0;
        for (std::int64_t h = g_ * d.group(); h < (g_ + 1) * d.group(); ++h)
          want += in.dout[static_cast<std::size_t>((b * d.heads + h) * d.head_dim + e)];
        EXPECT_NEAR(g.dk[kv], 0.0f, 1e-6f);
        EXPECT_FLOAT_EQ(g.dv[kv], want);
      }
}

TEST(Attention, AcceptsTheTokensByFeaturesLayoutOfAGemm) {
  const AttentionDims d{2, 5, 4, 2, 3};
  const auto in = make_inputs<float>(d, 71);
  const auto want = run_fwd(in.q, in.k, in.v, d);
  std::vector<float> out(q_elems(d));
  std::vector<float> lse(want.lse.size());
  std::vector<std::byte> ws(attention_fwd_workspace_bytes(d, DType::f32));
  const Shape q2{d.batch * d.seq, d.heads * d.head_dim}, kv2{d.batch * d.seq, d.kv_heads * d.head_dim};
  attention_fwd(view(out, q2), view(lse, lse_shape(d)), cview(in.q, q2), cview(in.k, kv2), cview(in.v, kv2), d, ws,
                StreamRef::host());
  EXPECT_EQ(std::memcmp(out.data(), want.out.data(), out.size() * sizeof(float)), 0);
}

TEST(Attention, RejectsBadArgumentsNamingTheDimensions) {
  const AttentionDims d{2, 5, 4, 2, 3};
  auto in = make_inputs<float>(d, 81);
  std::vector<float> out(q_elems(d)), lse(static_cast<std::size_t>(d.batch * d.heads * d.seq));
  std::vector<std::byte> ws(attention_fwd_workspace_bytes(d, DType::f32));
  const std::vector<float> big(1000);  // backs a k of the wrong shape, so the view itself is valid
  const auto call = [&](const AttentionDims& dims, Shape kshape, std::span<std::byte> w, DType lse_dt, StreamRef s) {
    attention_fwd(view(out, q_shape(d)), TensorView(lse.data(), lse_shape(d), lse_dt), cview(in.q, q_shape(d)),
                  cview(big, kshape), cview(in.v, kv_shape(d)), dims, w, s);
  };
  const StreamRef host = StreamRef::host();
  EXPECT_TRUE(test::throws_with(
      [&] {
        call({2, 5, 4, 3, 3}, kv_shape(d), ws, DType::f32, host);
      },
      {"attention_fwd", "heads = 4", "kv_heads = 3"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        call({2, 5, 4, 0, 3}, kv_shape(d), ws, DType::f32, host);
      },
      {"attention_fwd", "kv_heads = 0"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        call(d, Shape{2, 5, 4, 3}, ws, DType::f32, host);
      },
      {"attention_fwd", "k has shape [2, 5, 4, 3]", "expected [2, 5, 2, 3]", "[10, 6]", "kv_heads=2", "head_dim=3"}));
  EXPECT_TRUE(test::throws_with([&] { call(d, kv_shape(d), ws, DType::bf16, host); },
                                {"attention_fwd", "lse has dtype bf16", "expected fp32"}));
  EXPECT_TRUE(test::throws_with([&] { call(d, kv_shape(d), std::span(ws).first(8), DType::f32, host); },
                                {"attention_fwd", "workspace of 8 bytes"}));
  const StreamRef cuda = StreamRef::wrap(Device::cuda(0), nullptr);
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_fwd(TensorView(out.data(), q_shape(d), DType::f32, Device::cuda(0)),
                      TensorView(lse.data(), lse_shape(d), DType::f32, Device::cuda(0)),
                      ConstTensorView(in.q.data(), q_shape(d), DType::f32, Device::cpu()),
                      ConstTensorView(in.k.data(), kv_shape(d), DType::f32, Device::cuda(0)),
                      ConstTensorView(in.v.data(), kv_shape(d), DType::f32, Device::cuda(0)), d, ws, cuda);
      },
      {"attention_fwd", "q", "is on cpu but the stream is on cuda:0"}));
  // The backward checks its gradient buffers too.
  const auto f = run_fwd(in.q, in.k, in.v, d);
  std::vector<float> dq(q_elems(d)), dk(kv_elems(d)), dv(kv_elems(d));
  std::vector<std::byte> wsb(attention_bwd_workspace_bytes(d, DType::f32));
  EXPECT_TRUE(test::throws_with(
      [&] {
        attention_bwd(view(dq, q_shape(d)), view(dk, Shape{2, 5, 2, 2}), view(dv, kv_shape(d)),
                      cview(in.dout, q_shape(d)), cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)),
                      cview(in.v, kv_shape(d)), cview(f.out, q_shape(d)), cview(f.lse, lse_shape(d)), d, wsb, host);
      },
      {"attention_bwd", "dk has shape [2, 5, 2, 2]", "expected [2, 5, 2, 3]"}));
}

// The kernel choice (model.attention): names round-trip, an unknown one is refused naming the key and the
// fix; the host runs its tiled kernel for auto and unfused alike and refuses the fused (cuDNN) one; without
// a GPU the fused kernel is unavailable with a reason, never a crash.
TEST(Attention, KernelChoiceOnTheHost) {
  for (AttentionImpl i : {AttentionImpl::automatic, AttentionImpl::fused, AttentionImpl::unfused})
    EXPECT_EQ(attention_impl_from(to_string(i), "model.attention"), i);
  EXPECT_TRUE(test::throws_with<ConfigError>([] { attention_impl_from("flash", "model.attention"); },
                                             {"model.attention = \"flash\"", "auto, fused, unfused"}));
  const AttentionDims d{2, 5, 2, 1, 4};
  EXPECT_EQ(resolve_attention_impl(AttentionImpl::automatic, d, DType::bf16, Device::cpu()), AttentionImpl::unfused);
  EXPECT_EQ(resolve_attention_impl(AttentionImpl::unfused, d, DType::f32, Device::cpu()), AttentionImpl::unfused);
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { resolve_attention_impl(AttentionImpl::fused, d, DType::bf16, Device::cpu()); },
      {"fused", "CUDA device", "model.attention = auto"}));
  // fp32 is never fused: the reason names bf16, or, in a build without the fused kernel at all, that build.
  const std::string why = fused_attention_unavailable(d, DType::f32);
  EXPECT_TRUE(why.find("bf16") != std::string::npos || why.find("this build has no") != std::string::npos) << why;
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(fused_attention_unavailable(d, DType::bf16).empty());
  }
  // The CPU launchers take the choice and compute the same bits for auto and unfused.
  const auto in = make_inputs<float>(d, 7);
  const auto nl = static_cast<std::size_t>(d.batch * d.heads * d.seq);
  std::vector<float> o1(q_elems(d)), o2(q_elems(d)), l1(nl), l2(nl);
  std::vector<std::byte> ws(attention_fwd_workspace_bytes(d, DType::f32, Device::cpu(), AttentionImpl::unfused));
  const StreamRef host = StreamRef::host();
  attention_fwd(view(o1, q_shape(d)), view(l1, lse_shape(d)), cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)),
                cview(in.v, kv_shape(d)), d, ws, host, AttentionImpl::automatic);
  attention_fwd(view(o2, q_shape(d)), view(l2, lse_shape(d)), cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)),
                cview(in.v, kv_shape(d)), d, ws, host, AttentionImpl::unfused);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(l1, l2);
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_fwd(view(o1, q_shape(d)), view(l1, lse_shape(d)), cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)),
                      cview(in.v, kv_shape(d)), d, ws, host, AttentionImpl::fused);
      },
      {"fused", "model.attention"}));
}

}  // namespace
}  // namespace hzp::kernels
