// GPU tests: the CUDA twins of the matrix families (cuBLASLt GEMM in every layout the model uses, the
// unfused causal attention, softmax cross-entropy at the 155k vocabulary) against their CPU launchers
// on the same inputs, fp32 and bf16, forward and backward. Tolerances: fp32 GEMMs differ from OpenBLAS
// by summation order (rel L2 ~1e-6); bf16 outputs by one-ulp rounding flips of values that agree in fp32,
// and bf16 attention also by its bf16 probabilities (the CPU keeps them in fp32): rel L2 ~1e-2 allowed.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/gemm.hpp"
#include "kernel_test_util.hpp"

namespace hzp::test {
namespace {

const StreamRef kHost = StreamRef::host();

std::span<std::byte> bytes(std::vector<std::byte>& v) { return {v.data(), v.size()}; }
std::span<std::byte> bytes(DeviceTensor& d) { return {static_cast<std::byte*>(d.view.data()), d.view.bytes()}; }

struct GemmCase {
  bool ta, tb;
  std::int64_t m, n, k;
  DType ab, c;
  float beta;
};

template <typename AB, typename C>
void run_gemm_case(Gpu& gpu, const GemmCase& gc) {
  const Shape sa = gc.ta ? Shape{gc.k, gc.m} : Shape{gc.m, gc.k};
  const Shape sb = gc.tb ? Shape{gc.n, gc.k} : Shape{gc.k, gc.n};
  auto a = random_normal<AB>(static_cast<std::size_t>(gc.m * gc.k), 20);
  auto b = random_normal<AB>(static_cast<std::size_t>(gc.k * gc.n), 21);
  auto c0 = random_normal<C>(static_cast<std::size_t>(gc.m * gc.n), 22);
  std::vector<C> c = c0;
  std::vector<std::byte> ws(kernels::gemm_workspace_bytes(cview(c, {gc.m, gc.n}), cview(a, sa), cview(b, sb), gc.ta, gc.tb));
  kernels::gemm(view(c, {gc.m, gc.n}), cview(a, sa), cview(b, sb), gc.ta, gc.tb, 1.0f, gc.beta, bytes(ws), kHost);
  auto ga = gpu.upload(a, sa);
  auto gb = gpu.upload(b, sb);
  auto gcv = gpu.upload(c0, {gc.m, gc.n});
  auto gws = gpu.empty({static_cast<std::int64_t>(kernels::gemm_workspace_bytes(gcv.view, ga.view, gb.view, gc.ta, gc.tb))},
                       DType::u8, AllocationTag::workspace);
  kernels::gemm(gcv.view, ga.view, gb.view, gc.ta, gc.tb, 1.0f, gc.beta, bytes(gws), gpu.stream());
  const auto got = gpu.download<C>(gcv.view);
  const double tol = std::is_same_v<C, bf16> ? 4e-3 : 2e-6;
  EXPECT_TRUE(rel_l2_close(got, c, tol)) << "ta=" << gc.ta << " tb=" << gc.tb << " m=" << gc.m << " n=" << gc.n
                                         << " k=" << gc.k << " beta=" << gc.beta;
}

TEST(CudaGemm, EveryLayoutAndDtypeMatchesOpenBlas) {
  Gpu gpu;
  for (auto [ta, tb] : {std::pair{false, true}, {false, false}, {true, false}, {true, true}})
    for (auto [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{96, 80, 64}, {33, 17, 45}}) {
      run_gemm_case<float, float>(gpu, {ta, tb, m, n, k, DType::f32, DType::f32, 0.f});
      run_gemm_case<float, float>(gpu, {ta, tb, m, n, k, DType::f32, DType::f32, 1.f});
      run_gemm_case<bf16, bf16>(gpu, {ta, tb, m, n, k, DType::bf16, DType::bf16, 0.f});
      run_gemm_case<bf16, float>(gpu, {ta, tb, m, n, k, DType::bf16, DType::f32, 1.f});  // wgrad accumulation
    }
}

TEST(CudaGemm, WorkspaceTooSmallIsAClearError) {
  Gpu gpu;
  auto a = gpu.empty({8, 8}, DType::f32);
  auto b = gpu.empty({8, 8}, DType::f32);
  auto c = gpu.empty({8, 8}, DType::f32);
  EXPECT_TRUE(throws_with([&] { kernels::gemm(c.view, a.view, b.view, false, false, 1.f, 0.f, {}, gpu.stream()); },
                          {"gemm", "workspace"}));
}

template <typename T>
class CudaAttention : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaAttention, FloatTypes);

/// Attention forward and backward on the CPU (the tiled kernel, host `first`) and on the GPU (`impl`, a device copy
/// of `first`) on the same random inputs; checks every output within the dtype's tolerance and returns the GPU's
/// output and the value rows for further checks.
template <typename T>
std::pair<std::vector<T>, std::vector<T>> expect_gpu_attention_matches_cpu(const kernels::AttentionDims& d,
                                                                           const std::vector<std::int32_t>& first,
                                                                           kernels::AttentionImpl impl,
                                                                           std::uint64_t seed) {
  Gpu gpu;
  const Shape qs{d.batch, d.seq, d.heads, d.head_dim}, ks{d.batch, d.seq, d.kv_heads, d.head_dim};
  const Shape ls{d.batch, d.heads, d.seq};
  auto q = random_normal<T>(static_cast<std::size_t>(qs.numel()), seed);
  auto k = random_normal<T>(static_cast<std::size_t>(ks.numel()), seed + 1);
  auto v = random_normal<T>(static_cast<std::size_t>(ks.numel()), seed + 2);
  auto dout = random_normal<T>(static_cast<std::size_t>(qs.numel()), seed + 3);
  std::vector<T> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(static_cast<std::size_t>(ls.numel()));
  std::vector<std::byte> wf(kernels::attention_fwd_workspace_bytes(d, dtype_of_v<T>) + 8);
  std::vector<std::byte> wb(kernels::attention_bwd_workspace_bytes(d, dtype_of_v<T>) + 8);
  const auto automatic = kernels::AttentionImpl::automatic;
  kernels::attention_fwd(view(out, qs), view(lse, ls), cview(q, qs), cview(k, ks), cview(v, ks), d, bytes(wf), kHost,
                         automatic, first);
  kernels::attention_bwd(view(dq, qs), view(dk, ks), view(dv, ks), cview(dout, qs), cview(q, qs), cview(k, ks),
                         cview(v, ks), cview(out, qs), cview(lse, ls), d, bytes(wb), kHost, automatic, first);

  const bool masked = !first.empty();
  auto gfirst = gpu.upload(masked ? first : std::vector<std::int32_t>{0}, {masked ? d.batch * d.seq : 1});
  std::span<const std::int32_t> dev_first;
  if (masked) dev_first = {static_cast<const std::int32_t*>(gfirst.view.data()), first.size()};
  auto gq = gpu.upload(q, qs);
  auto gk = gpu.upload(k, ks);
  auto gv = gpu.upload(v, ks);
  auto gdo = gpu.upload(dout, qs);
  auto go = gpu.empty(qs, dtype_of_v<T>);
  auto gl = gpu.empty(ls, DType::f32);
  auto gdq = gpu.empty(qs, dtype_of_v<T>);
  auto gdk = gpu.empty(ks, dtype_of_v<T>);
  auto gdv = gpu.empty(ks, dtype_of_v<T>);
  const auto ws = [&](std::size_t n) { return gpu.empty({static_cast<std::int64_t>(n)}, DType::u8); };
  auto gwf = ws(kernels::attention_fwd_workspace_bytes(d, dtype_of_v<T>, gpu.device(), impl, masked));
  auto gwb = ws(kernels::attention_bwd_workspace_bytes(d, dtype_of_v<T>, gpu.device(), impl, masked));
  kernels::attention_fwd(go.view, gl.view, gq.view, gk.view, gv.view, d, bytes(gwf), gpu.stream(), impl, dev_first);
  kernels::attention_bwd(gdq.view, gdk.view, gdv.view, gdo.view, gq.view, gk.view, gv.view, go.view, gl.view, d,
                         bytes(gwb), gpu.stream(), impl, dev_first);
  const double tol = std::is_same_v<T, bf16> ? 1.5e-2 : 1e-5;
  std::vector<T> got = gpu.download<T>(go.view);
  EXPECT_TRUE(rel_l2_close(got, out, tol)) << "out";
  EXPECT_TRUE(all_close(gpu.download<float>(gl.view), lse, 1e-5, 1e-5)) << "lse";
  EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdq.view), dq, tol)) << "dq";
  EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdk.view), dk, tol)) << "dk";
  EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdv.view), dv, tol)) << "dv";
  return {std::move(got), std::move(v)};
}

TYPED_TEST(CudaAttention, ForwardAndBackwardMatchTheCpuWithGroupedHeads) {
  // The unfused twin by name (auto would take cuDNN's kernel for bf16; test_cuda_fused_attention.cpp has it).
  expect_gpu_attention_matches_cpu<TypeParam>({2, 40, 4, 2, 16}, {}, kernels::AttentionImpl::unfused, 23);
}

// Document masking (data.packing = documents): the unfused twin with a device `first` against the CPU's tiled kernel
// with the host copy; documents of 1-5 tokens, a boundary on a 64-row tile edge, grouped heads. `auto` resolves to
// the unfused kernel when a mask is given (cuDNN's graph is plain causal), also for bf16.
TYPED_TEST(CudaAttention, DocumentMaskMatchesTheCpu) {
  using T = TypeParam;
  const kernels::AttentionDims d{2, 80, 4, 2, 16};
  const std::vector<std::vector<std::int32_t>> starts = {{0, 1, 3, 8, 64, 66}, {0, 40, 41}};
  std::vector<std::int32_t> first(static_cast<std::size_t>(d.batch * d.seq));
  for (std::size_t b = 0; b < starts.size(); ++b)
    for (std::size_t i = 0; i < starts[b].size(); ++i) {
      const std::int64_t end = i + 1 < starts[b].size() ? starts[b][i + 1] : d.seq;
      for (std::int64_t t = starts[b][i]; t < end; ++t) first[b * d.seq + static_cast<std::size_t>(t)] = starts[b][i];
    }
  const auto automatic = kernels::AttentionImpl::automatic;
  ASSERT_EQ(kernels::resolve_attention_impl(automatic, d, dtype_of_v<T>, Device::cuda(0), true),
            kernels::AttentionImpl::unfused);
  const auto [got, v] = expect_gpu_attention_matches_cpu<T>(d, first, automatic, 33);
  // Row 1 of sequence 0 starts a document, so it sees key 1 only (plain causal would mix in key 0): its output
  // is its own value row, whatever the scores.
  const std::int64_t t = 1;
  const double tol = std::is_same_v<T, bf16> ? 1e-2 : 1e-6;
  for (std::int64_t h = 0; h < d.heads; ++h)
    for (std::int64_t e = 0; e < d.head_dim; ++e) {
      const std::size_t o = static_cast<std::size_t>((t * d.heads + h) * d.head_dim + e);
      const std::size_t vi = static_cast<std::size_t>((t * d.kv_heads + h / d.group()) * d.head_dim + e);
      EXPECT_NEAR(to_double(got[o]), to_double(v[vi]), tol);
    }
}

template <typename T>
class CudaCrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(CudaCrossEntropy, FloatTypes);

TYPED_TEST(CudaCrossEntropy, LargeVocabularyForwardBackwardAndFusedMatchTheCpu) {
  using T = TypeParam;
  Gpu gpu;
  for (std::int64_t V : {155136, 1001}) {  // the Seed-OSS vocabulary (16-byte rows), and an odd width
    const std::int64_t N = 6;
    auto logits = random_normal<T>(static_cast<std::size_t>(N * V), 27, 0, 4);
    auto targets = random_ints(static_cast<std::size_t>(N), 28, 0, static_cast<std::int32_t>(V - 1));
    targets[3] = -100;  // ignored
    kernels::CrossEntropyGrad grad{.ignore_index = -100, .normaliser = 37.0, .dloss = 1.0};
    std::vector<float> losses(static_cast<std::size_t>(N));
    std::vector<T> dl(logits.size());
    const auto r = kernels::cross_entropy_fwd(view(losses, {N}), cview(logits, {N, V}), cview(targets, {N}), -100, kHost);
    kernels::cross_entropy_bwd(view(dl, {N, V}), cview(logits, {N, V}), cview(targets, {N}), grad, kHost);

    auto gx = gpu.upload(logits, {N, V});
    auto gt = gpu.upload(targets, {N});
    auto gls = gpu.empty({N}, DType::f32);
    auto gdl = gpu.empty({N, V}, dtype_of_v<T>);
    const auto gr = kernels::cross_entropy_fwd(gls.view, gx.view, gt.view, -100, gpu.stream());
    EXPECT_EQ(gr.n_valid, r.n_valid);
    EXPECT_NEAR(gr.loss_sum, r.loss_sum, 1e-5 * r.loss_sum) << "V=" << V;
    EXPECT_TRUE(all_close(gpu.download<float>(gls.view), losses, 1e-5, 1e-5)) << "V=" << V;
    kernels::cross_entropy_bwd(gdl.view, gx.view, gt.view, grad, gpu.stream());
    const double tol = std::is_same_v<T, bf16> ? 4e-3 : 1e-5;
    EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdl.view), dl, tol)) << "V=" << V;
    // fused, in place over the logits (as the model calls it)
    const auto fr = kernels::cross_entropy_fwd_bwd(gls.view, gx.view, gx.view, gt.view, grad, gpu.stream());
    EXPECT_NEAR(fr.loss_sum, r.loss_sum, 1e-5 * r.loss_sum);
    EXPECT_TRUE(rel_l2_close(gpu.download<T>(gx.view), dl, tol)) << "fused V=" << V;
    EXPECT_EQ(kernels::cross_entropy_count_valid(gt.view, -100, gpu.stream()), N - 1);
  }
}

}  // namespace
}  // namespace hzp::test
