// GEMM through our wrapper (hzp::kernels::gemm) against raw cblas_sgemm on the model's linear-layer
// shapes, so the wrapper's overhead (validation, and for bf16 the widening into the workspace and the
// rounding back) is visible; plus RMSNorm forward+backward bandwidth. OpenBLAS is pinned to one
// thread (openblas_set_num_threads(1) in main, one_core_main.hpp): the figures are per core, as a rank sees them when
// ranks share the machine's cores, and are not disturbed by OpenBLAS's pool fighting other ranks.
// Rates are over the benchmark thread's CPU time (Google Benchmark's default), which with one BLAS
// thread is all the work done; on a shared machine wall time would also count time spent queued.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "hzp/kernels/gemm.hpp"
#include "hzp/kernels/rmsnorm.hpp"
#include "one_core_main.hpp"

namespace {

using hzp::bf16;
using hzp::ConstTensorView;
using hzp::DType;
using hzp::Shape;
using hzp::StreamRef;
using hzp::TensorView;

template <typename T>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(gen));
  return v;
}

// A linear layer y = x·Wᵀ with x [tokens, in], W [out, in] has three GEMMs per step:
//   pass 0 forward  y  = x·Wᵀ   M=tokens N=out K=in     (NT)
//   pass 1 dgrad    dx = dy·W   M=tokens N=in  K=out    (NN)
//   pass 2 wgrad    dW = dyᵀ·x  M=out    N=in  K=tokens (TN)
struct Problem {
  std::int64_t m, n, k;
  bool ta, tb;
  Shape a, b, c;
};

Problem problem(const benchmark::State& st) {
  const std::int64_t tokens = st.range(0), in = st.range(1), out = st.range(2);
  switch (st.range(3)) {
    case 0: return {tokens, out, in, false, true, {tokens, in}, {out, in}, {tokens, out}};
    case 1: return {tokens, in, out, false, false, {tokens, out}, {out, in}, {tokens, in}};
    default: return {out, in, tokens, true, false, {tokens, out}, {tokens, in}, {out, in}};
  }
}

void set_flops(benchmark::State& st, const Problem& p) {
  st.counters["flops"] = benchmark::Counter(2.0 * static_cast<double>(p.m * p.n * p.k) *
                                                static_cast<double>(st.iterations()),
                                            benchmark::Counter::kIsRate);
}

void BM_sgemm_raw(benchmark::State& st) {
  const Problem p = problem(st);
  const auto a = random_vector<float>(p.a.numel(), 1), b = random_vector<float>(p.b.numel(), 2);
  std::vector<float> c(p.c.numel());
  const auto lda = static_cast<blasint>(p.a[1]), ldb = static_cast<blasint>(p.b[1]);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(p.m), static_cast<blasint>(p.n), static_cast<blasint>(p.k), 1.0f, a.data(), lda,
                b.data(), ldb, 0.0f, c.data(), static_cast<blasint>(p.n));
    benchmark::ClobberMemory();
  }
  set_flops(st, p);
}

// T = operand type; C is T for the forward and dgrad passes, fp32 for wgrad when T is bf16 (the
// model's fp32 weight gradients).
template <typename T>
void BM_gemm_wrapper(benchmark::State& st) {
  const Problem p = problem(st);
  const auto a = random_vector<T>(p.a.numel(), 1), b = random_vector<T>(p.b.numel(), 2);
  const bool wgrad_fp32 = std::is_same_v<T, bf16> && st.range(3) == 2;
  std::vector<T> c(p.c.numel());
  std::vector<float> c32(wgrad_fp32 ? p.c.numel() : 0);
  const DType dt = hzp::dtype_of_v<T>;
  const TensorView cv = wgrad_fp32 ? TensorView(c32.data(), p.c, DType::f32) : TensorView(c.data(), p.c, dt);
  const ConstTensorView av(a.data(), p.a, dt), bv(b.data(), p.b, dt);
  std::vector<std::byte> ws(hzp::kernels::gemm_workspace_bytes(cv, av, bv, p.ta, p.tb));
  for (auto _ : st) {
    hzp::kernels::gemm(cv, av, bv, p.ta, p.tb, 1.0f, 0.0f, ws, StreamRef::host());
    benchmark::ClobberMemory();
  }
  set_flops(st, p);
}

void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "in", "out", "pass"});
  // tokens = 1024 (e.g. 2 sequences of 512); hidden 512, SwiGLU 1536 (up/gate: 512->1536, down:
  // 1536->512), and an LM head of 8192 entries.
  for (const auto& [in, out] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {512, 512}, {512, 1536}, {1536, 512}, {512, 8192}})
    for (std::int64_t pass = 0; pass < 3; ++pass) b->Args({1024, in, out, pass});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_sgemm_raw)->Apply(gemm_shapes);
BENCHMARK_TEMPLATE(BM_gemm_wrapper, float)->Apply(gemm_shapes);
BENCHMARK_TEMPLATE(BM_gemm_wrapper, bf16)->Apply(gemm_shapes);

// RMSNorm forward then backward on [tokens, dim]; bytes are what the two passes must move at least:
// fwd reads x and writes y, bwd reads dy and x and writes dx (T each), plus w, rstd and fp32 dw.
template <typename T>
void BM_rmsnorm_fwd_bwd(benchmark::State& st) {
  const std::int64_t tokens = st.range(0), dim = st.range(1);
  const DType dt = hzp::dtype_of_v<T>;
  const auto x = random_vector<T>(tokens * dim, 3), dy = random_vector<T>(tokens * dim, 4);
  const auto w = random_vector<T>(dim, 5);
  std::vector<T> y(tokens * dim), dx(tokens * dim);
  std::vector<float> rstd(tokens), dw(dim);
  const TensorView yv(y.data(), {tokens, dim}, dt), dxv(dx.data(), {tokens, dim}, dt);
  const TensorView rv(rstd.data(), {tokens}, DType::f32), dwv(dw.data(), {dim}, DType::f32);
  const ConstTensorView xv(x.data(), {tokens, dim}, dt), dyv(dy.data(), {tokens, dim}, dt), wv(w.data(), {dim}, dt);
  for (auto _ : st) {
    hzp::kernels::rmsnorm_fwd(yv, rv, xv, wv, 1e-5f, StreamRef::host());
    hzp::kernels::rmsnorm_bwd(dxv, dwv, dyv, xv, wv, rv, false, StreamRef::host());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(5 * tokens * dim * sizeof(T) + 2 * dim * sizeof(T) +
                                           2 * tokens * sizeof(float) + dim * sizeof(float));
  st.counters["bytes_per_second"] =
      benchmark::Counter(bytes * static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK_TEMPLATE(BM_rmsnorm_fwd_bwd, float)
    ->ArgNames({"tokens", "dim"})
    ->Args({1024, 512})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_rmsnorm_fwd_bwd, bf16)
    ->ArgNames({"tokens", "dim"})
    ->Args({1024, 512})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return hzp::bench::run_on_one_core(argc, argv); }
