// GPU tests of the fused attention kernel (cuDNN's SDPA, attention_cudnn.cpp) at the presets' head shapes:
// bf16 forward (out, lse) and every gradient against the unfused kernel run in fp32 on the same inputs
// widened (the fp32 unfused twin is itself checked against the CPU in test_cuda_matmul.cpp, and the CPU
// against the fp64 scalar reference), with the bf16 unfused kernel measured beside it for scale. Outputs are
// poisoned with NaN first, so an element the kernel never writes fails. Tolerance: METHOD's bf16 band, rel L2
// <= 1e-2 for bf16 outputs; lse (fp32, ~ln T) to 2e-3 absolute plus relative. The long-sequence cases keep
// one key/value head's group (heads/kv_heads query heads): the fp32 reference holds KV·T² floats per pass.
// Its backward keeps two score rows of T floats in a block's shared memory (227 KB on Hopper: T <= 29056),
// so at T = 32768 the forward is checked and the backward at T = 28672, the longest multiple of 4096 it holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/kernels/attention.hpp"
#include "kernel_test_util.hpp"

namespace hzp::test {
namespace {

using kernels::AttentionDims;
using kernels::AttentionImpl;

std::span<std::byte> bytes(DeviceTensor& d) { return {static_cast<std::byte*>(d.view.data()), d.view.bytes()}; }

template <typename T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> w(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) w[i] = static_cast<float>(to_double(v[i]));
  return w;
}

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;  // widened to fp32 on the host
};

// One forward and backward of `impl` in dtype T on the given inputs; every output poisoned first.
template <typename T>
Outputs run(Gpu& gpu, const AttentionDims& d, AttentionImpl impl, const std::vector<T>& q, const std::vector<T>& k,
            const std::vector<T>& v, const std::vector<T>& dout, bool backward = true) {
  const Shape qs{d.batch, d.seq, d.heads, d.head_dim}, ks{d.batch, d.seq, d.kv_heads, d.head_dim};
  const Shape ls{d.batch, d.heads, d.seq};
  const T nan = T(std::numeric_limits<float>::quiet_NaN());
  Outputs r;
  {
    auto gq = gpu.upload(q, qs);
    auto gk = gpu.upload(k, ks);
    auto gv = gpu.upload(v, ks);
    auto gdo = gpu.upload(dout, qs);
    auto go = gpu.upload(std::vector<T>(q.size(), nan), qs);
    auto gl = gpu.upload(std::vector<float>(static_cast<std::size_t>(ls.numel()), NAN), ls);
    auto gdq = gpu.upload(std::vector<T>(q.size(), nan), qs);
    auto gdk = gpu.upload(std::vector<T>(k.size(), nan), ks);
    auto gdv = gpu.upload(std::vector<T>(k.size(), nan), ks);
    const DType t = dtype_of_v<T>;
    auto wf = gpu.empty({static_cast<std::int64_t>(kernels::attention_fwd_workspace_bytes(d, t, gpu.device(), impl)) + 1},
                        DType::u8, AllocationTag::workspace);
    auto wb = gpu.empty({backward ? static_cast<std::int64_t>(kernels::attention_bwd_workspace_bytes(d, t, gpu.device(),
                                                                                                    impl)) + 1 : 1},
                        DType::u8, AllocationTag::workspace);
    kernels::attention_fwd(go.view, gl.view, gq.view, gk.view, gv.view, d, bytes(wf), gpu.stream(), impl);
    r.out = widen(gpu.download<T>(go.view));
    r.lse = gpu.download<float>(gl.view);
    if (!backward) return r;
    kernels::attention_bwd(gdq.view, gdk.view, gdv.view, gdo.view, gq.view, gk.view, gv.view, go.view, gl.view, d,
                           bytes(wb), gpu.stream(), impl);
    r.dq = widen(gpu.download<T>(gdq.view));
    r.dk = widen(gpu.download<T>(gdk.view));
    r.dv = widen(gpu.download<T>(gdv.view));
  }
  return r;
}

struct Case {
  const char* name;
  AttentionDims dims;
};

void check_fused_against_fp32(const Case& c, std::uint64_t seed, bool backward = true) {
  const AttentionDims& d = c.dims;
  const std::string why = kernels::fused_attention_unavailable(d, DType::bf16);
  ASSERT_TRUE(why.empty()) << c.name << ": " << why;
  Gpu gpu;
  const auto nq = static_cast<std::size_t>(d.batch * d.seq * d.heads * d.head_dim);
  const auto nk = static_cast<std::size_t>(d.batch * d.seq * d.kv_heads * d.head_dim);
  const auto q = random_normal<bf16>(nq, seed);
  const auto k = random_normal<bf16>(nk, seed + 1);
  const auto v = random_normal<bf16>(nk, seed + 2);
  const auto dout = random_normal<bf16>(nq, seed + 3);
  const Outputs ref = run<float>(gpu, d, AttentionImpl::unfused, widen(q), widen(k), widen(v), widen(dout), backward);
  const Outputs fused = run<bf16>(gpu, d, AttentionImpl::fused, q, k, v, dout, backward);
  const Outputs unfused = run<bf16>(gpu, d, AttentionImpl::unfused, q, k, v, dout, backward);
  const char* names[] = {"out", "dq", "dk", "dv"};
  const std::vector<float>* f[] = {&fused.out, &fused.dq, &fused.dk, &fused.dv};
  const std::vector<float>* u[] = {&unfused.out, &unfused.dq, &unfused.dk, &unfused.dv};
  const std::vector<float>* e[] = {&ref.out, &ref.dq, &ref.dk, &ref.dv};
  for (int i = 0; i < (backward ? 4 : 1); ++i) {
    const double fe = error_stats(*f[i], *e[i]).rel_l2, ue = error_stats(*u[i], *e[i]).rel_l2;
    std::printf("%s %s: rel L2 vs fp32 unfused: fused %.3e, unfused bf16 %.3e\n", c.name, names[i], fe, ue);
    EXPECT_TRUE(rel_l2_close(*f[i], *e[i], 1e-2)) << c.name << " " << names[i];
  }
  EXPECT_TRUE(all_close(fused.lse, ref.lse, 2e-4, 2e-3)) << c.name << " lse";
}

// The presets' head shapes (1b: 32/8 heads of 64; seed-oss-36b: 80/8 heads of 128) at T = 4096, whole.
TEST(CudaFusedAttention, MatchesTheFp32ReferenceAtThePresetsHeadShapes) {
  check_fused_against_fp32({"1b T=4096", {1, 4096, 32, 8, 64}}, 101);
  check_fused_against_fp32({"seed-oss-36b T=4096", {1, 4096, 80, 8, 128}}, 111);
}

// One key/value head and its group of query heads (4 of 64 for 1b, 10 of 128 for 36b): the forward at
// T = 32768, forward and backward at 28672 (the reference's backward limit, see the top).
TEST(CudaFusedAttention, MatchesTheFp32ReferenceAtLongSequences) {
  check_fused_against_fp32({"1b-group T=32768 fwd", {1, 32768, 4, 1, 64}}, 121, false);
  check_fused_against_fp32({"seed-oss-36b-group T=32768 fwd", {1, 32768, 10, 1, 128}}, 131, false);
  check_fused_against_fp32({"1b-group T=28672", {1, 28672, 4, 1, 64}}, 125);
  check_fused_against_fp32({"seed-oss-36b-group T=28672", {1, 28672, 10, 1, 128}}, 135);
}

// Small and odd shapes: several sequences in a batch, T not a multiple of any tile, plain multi-head.
TEST(CudaFusedAttention, MatchesTheFp32ReferenceAtOddShapes) {
  check_fused_against_fp32({"B=3 T=77 8/2x64", {3, 77, 8, 2, 64}}, 141);
  check_fused_against_fp32({"B=2 T=300 6/3x32", {2, 300, 6, 3, 32}}, 161);
}

// What the fused kernel cannot run is refused by name when asked for, and auto runs the unfused twin then.
TEST(CudaFusedAttention, RefusalsAndTheAutomaticChoice) {
  Gpu gpu;
  const AttentionDims d{1, 64, 4, 2, 16};
  EXPECT_EQ(kernels::resolve_attention_impl(AttentionImpl::automatic, d, DType::bf16, gpu.device()),
            AttentionImpl::fused);
  EXPECT_EQ(kernels::resolve_attention_impl(AttentionImpl::automatic, d, DType::f32, gpu.device()),
            AttentionImpl::unfused);
  EXPECT_TRUE(throws_with([&] { kernels::resolve_attention_impl(AttentionImpl::fused, d, DType::f32, gpu.device()); },
                          {"model.attention = fused", "bf16", "fp32"}));
  const AttentionDims odd{1, 64, 4, 2, 12};  // head_dim not a multiple of 8
  EXPECT_TRUE(throws_with([&] { kernels::resolve_attention_impl(AttentionImpl::fused, odd, DType::bf16, gpu.device()); },
                          {"head_dim = 12"}));
  EXPECT_EQ(kernels::resolve_attention_impl(AttentionImpl::automatic, odd, DType::bf16, gpu.device()),
            AttentionImpl::unfused);
  // A shape cuDNN itself refuses (9.19: "s_q = s_kv = 1 is not supported" in the backward): the reason is
  // cuDNN's, and auto runs the unfused kernels.
  const AttentionDims one{2, 1, 4, 4, 16};
  const std::string why = kernels::fused_attention_unavailable(one, DType::bf16);
  if (!why.empty()) {
    EXPECT_NE(why.find("cuDNN"), std::string::npos) << why;
    EXPECT_EQ(kernels::resolve_attention_impl(AttentionImpl::automatic, one, DType::bf16, gpu.device()),
              AttentionImpl::unfused);
  }
}

// The fused kernel's repeatability, reported (cuDNN's backward may accumulate dQ with atomics); the forward
// must be bitwise repeatable.
TEST(CudaFusedAttention, ForwardIsRepeatable) {
  Gpu gpu;
  const AttentionDims d{2, 512, 8, 2, 64};
  const auto nq = static_cast<std::size_t>(d.batch * d.seq * d.heads * d.head_dim);
  const auto nk = static_cast<std::size_t>(d.batch * d.seq * d.kv_heads * d.head_dim);
  const auto q = random_normal<bf16>(nq, 171), k = random_normal<bf16>(nk, 172), v = random_normal<bf16>(nk, 173);
  const auto dout = random_normal<bf16>(nq, 174);
  const Outputs a = run<bf16>(gpu, d, AttentionImpl::fused, q, k, v, dout);
  const Outputs b = run<bf16>(gpu, d, AttentionImpl::fused, q, k, v, dout);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  std::printf("fused backward bitwise repeatable: dq %s, dk %s, dv %s\n", a.dq == b.dq ? "yes" : "no",
              a.dk == b.dk ? "yes" : "no", a.dv == b.dv ? "yes" : "no");
}

}  // namespace
}  // namespace hzp::test
