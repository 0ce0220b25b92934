// GPU benchmarks of the CUDA kernels (docs/cuda.md): kernels::gemm (cuBLASLt, the heuristic's first
// algorithm) on the `1b` model's GEMM shapes (one 4096-token micro-batch; forward NT, data-gradient NN,
// weight-gradient TN), with the best cuBLASLt algorithm measured on the same shape as a counter; the
// fused cross-entropy forward+backward and the fused AdamW step in bytes/s; a device-to-device copy as the
// memory-bandwidth ceiling both are read against; and causal attention, cuDNN's fused kernel against the
// unfused one, at the 1b and seed-oss-36b head shapes (TFLOP/s counting the causal half of the work); and one
// (query block, key block) pair of the blocked attention ring attention runs, at 1b's heads. Times are CUDA events around the launch
// on the benchmark's stream (manual time); inputs are random, never zeros.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "gpu_bench_main.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/gemm.hpp"

namespace {

using namespace hzp;

struct Device0 {
  CudaBacking backing{0};
  CachingAllocator alloc{backing};
  Stream stream{Device::cuda(0)};
};
Device0& dev() {
  static Device0 d;
  return d;
}

TensorView tensor(Allocation& a, Shape s, DType t) { return TensorView(a.data(), s, t, Device::cuda(0)); }

/// Fills a device tensor with N(0, scale) values (generated in fp32 on the host, cast on the device).
void fill_random(TensorView t, float scale, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> h(static_cast<std::size_t>(std::min<std::int64_t>(t.numel(), std::int64_t{1} << 24)));
  for (float& x : h) x = dist(gen);
  Allocation staging = dev().alloc.allocate(h.size() * sizeof(float), AllocationTag::workspace);
  copy_bytes(staging.data(), Device::cuda(0), h.data(), Device::cpu(), h.size() * sizeof(float), dev().stream);
  const std::size_t esz = dtype_size(t.dtype());
  for (std::int64_t off = 0; off < t.numel(); off += static_cast<std::int64_t>(h.size())) {
    const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(h.size()), t.numel() - off);
    kernels::cast(TensorView(static_cast<std::byte*>(t.data()) + off * esz, Shape{n}, t.dtype(), Device::cuda(0)),
                  ConstTensorView(staging.data(), Shape{n}, DType::f32, Device::cuda(0)), dev().stream);
  }
  dev().stream.ref().synchronize();
}

/// Times `fn` (enqueued on the stream) with CUDA events: kReps calls back to back per iteration, the
/// iteration's time their mean. One call between two events also timed the host's enqueue (the device idles
/// until the launch arrives): on an H100 that added ~10 us to 20-60 us GEMMs against the best-algorithm
/// figure, which is timed back to back; in training the host enqueues ahead, so back to back is the fair form.
constexpr int kReps = 10;
template <typename Fn>
void run_timed(benchmark::State& state, Fn&& fn) {
  TimedEvent t0(Device::cuda(0)), t1(Device::cuda(0));
  fn();  // warm-up: handles, heuristics, module load
  dev().stream.ref().synchronize();
  for (auto _ : state) {
    t0.record(dev().stream);
    for (int r = 0; r < kReps; ++r) fn();
    t1.record(dev().stream);
    t1.synchronize();
    state.SetIterationTime(TimedEvent::elapsed_ms(t0, t1) * 1e-3 / kReps);
  }
}

// --- GEMM on the 1b shapes ----------------------------------------------------------------------------
// (out features, in features) of each 1b linear layer; tokens = 4096.
struct Linear {
  const char* name;
  std::int64_t out, in;
};
constexpr Linear kLinears[] = {{"wq", 2048, 2048}, {"wkv", 512, 2048}, {"wo", 2048, 2048},
                               {"w_gate_up", 8192, 2048}, {"w_down", 2048, 8192}, {"lm_head", 128256, 2048}};
constexpr std::int64_t kTokens = 4096;

/// The best time over every algorithm cuBLASLt's heuristic offers (up to 32) for C = op(A) op(B) on these
/// row-major shapes, bf16 in, C dtype as given, fp32 accumulation; each timed over 10 runs.
double best_cublaslt_seconds(TensorView c, ConstTensorView a, ConstTensorView b, bool ta, bool tb) {
  cublasLtHandle_t h = nullptr;
  cublasLtCreate(&h);
  const auto rows = [](ConstTensorView t) { return static_cast<std::uint64_t>(t.shape()[0]); };
  const auto cols = [](ConstTensorView t) { return static_cast<std::uint64_t>(t.shape()[1]); };
  cublasLtMatrixLayout_t la, lb, lc;
  const cudaDataType_t ct = c.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, cols(b), rows(b), static_cast<std::int64_t>(cols(b)));
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, cols(a), rows(a), static_cast<std::int64_t>(cols(a)));
  cublasLtMatrixLayoutCreate(&lc, ct, cols(c), rows(c), static_cast<std::int64_t>(cols(c)));
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
  const std::size_t ws_bytes = std::size_t{32} << 20;
  Allocation ws = dev().alloc.allocate(ws_bytes, AllocationTag::workspace);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const std::uint64_t wsb = ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  std::vector<cublasLtMatmulHeuristicResult_t> results(32);
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 32, results.data(), &found);
  const float alpha = 1.f, beta = 0.f;
  auto* s = static_cast<cudaStream_t>(dev().stream.ref().native());
  double best = 1e30;
  TimedEvent t0(Device::cuda(0)), t1(Device::cuda(0));
  for (int i = 0; i < found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(h, op, &alpha, b.data(), la, a.data(), lb, &beta, c.data(), lc, c.data(), lc,
                            &results[static_cast<std::size_t>(i)].algo, ws.data(), ws_bytes, s);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    t0.record(dev().stream);
    for (int r = 0; r < kReps; ++r) run();
    t1.record(dev().stream);
    t1.synchronize();
    best = std::min(best, TimedEvent::elapsed_ms(t0, t1) * 1e-3 / kReps);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(op);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtDestroy(h);
  return best;
}

// Args: linear index, layout (0 = fwd NT, 1 = dgrad NN, 2 = wgrad TN with fp32 C).
void BM_Gemm1b(benchmark::State& state) {
  const Linear& l = kLinears[state.range(0)];
  const int layout = static_cast<int>(state.range(1));
  state.SetLabel(std::string(l.name) + (layout == 0 ? " fwd" : layout == 1 ? " dgrad" : " wgrad"));
  const std::int64_t N = kTokens;
  Shape sa, sb, sc;
  bool ta = false, tb = false;
  DType ct = DType::bf16;
  if (layout == 0) { sa = {N, l.in}; sb = {l.out, l.in}; sc = {N, l.out}; tb = true; }           // y = x Wᵀ
  else if (layout == 1) { sa = {N, l.out}; sb = {l.out, l.in}; sc = {N, l.in}; }                  // dx = dy W
  else { sa = {N, l.out}; sb = {N, l.in}; sc = {l.out, l.in}; ta = true; ct = DType::f32; }       // dW = dyᵀ x
  Allocation ma = dev().alloc.allocate(static_cast<std::size_t>(sa.numel()) * 2, AllocationTag::other);
  Allocation mb = dev().alloc.allocate(static_cast<std::size_t>(sb.numel()) * 2, AllocationTag::other);
  Allocation mc = dev().alloc.allocate(static_cast<std::size_t>(sc.numel()) * dtype_size(ct), AllocationTag::other);
  const TensorView a = tensor(ma, sa, DType::bf16), b = tensor(mb, sb, DType::bf16), c = tensor(mc, sc, ct);
  fill_random(a, 1.f, 1);
  fill_random(b, 0.02f, 2);
  const std::size_t wsn = kernels::gemm_workspace_bytes(c, a, b, ta, tb);
  Allocation ws = dev().alloc.allocate(wsn, AllocationTag::workspace);
  const std::span<std::byte> wspan(static_cast<std::byte*>(ws.data()), wsn);
  run_timed(state, [&] { kernels::gemm(c, a, b, ta, tb, 1.f, 0.f, wspan, dev().stream); });
  const double flops = 2.0 * static_cast<double>(N) * static_cast<double>(l.out) * static_cast<double>(l.in);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  const double best = best_cublaslt_seconds(c, a, b, ta, tb);
  state.counters["best_algo_TFLOP/s"] = flops * 1e-12 / best;
}
BENCHMARK(BM_Gemm1b)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {0, 1, 2}})
    ->ArgNames({"linear", "layout"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- memory-bound kernels against the copy ceiling ----------------------------------------------------
void BM_DeviceCopy(benchmark::State& state) {
  const std::size_t bytes = std::size_t{1} << 30;
  Allocation a = dev().alloc.allocate(bytes, AllocationTag::other), b = dev().alloc.allocate(bytes, AllocationTag::other);
  zero_bytes(a.data(), bytes, dev().stream);
  run_timed(state, [&] { copy_bytes(b.data(), Device::cuda(0), a.data(), Device::cuda(0), bytes, dev().stream); });
  // bytes read + bytes written
  state.counters["bytes_per_second"] =
      benchmark::Counter(2.0 * static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DeviceCopy)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The backward over [4096, V] bf16 logits into a separate dlogits (so every iteration sees the same random
// logits): reads the logits once, writes dlogits once.
void BM_CrossEntropy(benchmark::State& state) {
  const std::int64_t N = kTokens, V = state.range(0);
  Allocation ml = dev().alloc.allocate(static_cast<std::size_t>(N * V) * 2, AllocationTag::other);
  Allocation mt = dev().alloc.allocate(static_cast<std::size_t>(N) * 4, AllocationTag::other);
  Allocation md = dev().alloc.allocate(static_cast<std::size_t>(N * V) * 2, AllocationTag::other);
  const TensorView logits = tensor(ml, {N, V}, DType::bf16);
  std::vector<std::int32_t> t(static_cast<std::size_t>(N));
  std::mt19937 gen(3);
  for (auto& x : t) x = static_cast<std::int32_t>(gen() % static_cast<unsigned>(V));
  copy_bytes(mt.data(), Device::cuda(0), t.data(), Device::cpu(), t.size() * 4, dev().stream);
  const kernels::CrossEntropyGrad grad{.ignore_index = -1, .normaliser = static_cast<double>(N), .dloss = 1.0};
  const ConstTensorView targets(mt.data(), Shape{N}, DType::i32, Device::cuda(0));
  const TensorView dlogits = tensor(md, {N, V}, DType::bf16);
  fill_random(logits, 2.f, 4);
  // The backward alone (the forward adds a host synchronisation for the loss sum): one read, one write.
  run_timed(state, [&] { kernels::cross_entropy_bwd(dlogits, logits, targets, grad, dev().stream); });
  state.counters["bytes_per_second"] =
      benchmark::Counter(2.0 * static_cast<double>(N * V) * 2, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CrossEntropy)->Arg(128256)->Arg(155136)->ArgName("vocab")->UseManualTime()->Unit(benchmark::kMicrosecond);

// AdamW over n fp32 parameters with the bf16 copy: reads p, m, v, g (16 B), writes p, m, v (12 B) and bf16 (2 B).
void BM_AdamW(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  Allocation p = dev().alloc.allocate(static_cast<std::size_t>(n) * 4, AllocationTag::master);
  Allocation m = dev().alloc.allocate(static_cast<std::size_t>(n) * 4, AllocationTag::adam_m);
  Allocation v = dev().alloc.allocate(static_cast<std::size_t>(n) * 4, AllocationTag::adam_v);
  Allocation g = dev().alloc.allocate(static_cast<std::size_t>(n) * 4, AllocationTag::grad);
  Allocation pb = dev().alloc.allocate(static_cast<std::size_t>(n) * 2, AllocationTag::param);
  const Shape s{n};
  fill_random(tensor(p, s, DType::f32), 0.02f, 5);
  fill_random(tensor(g, s, DType::f32), 1e-3f, 6);
  zero_bytes(m.data(), static_cast<std::size_t>(n) * 4, dev().stream);
  zero_bytes(v.data(), static_cast<std::size_t>(n) * 4, dev().stream);
  kernels::AdamWHyper h;
  h.lr = 3e-4;
  h.weight_decay = 0.1;
  h.step = 10;
  run_timed(state, [&] {
    kernels::adamw_step(tensor(p, s, DType::f32), tensor(m, s, DType::f32), tensor(v, s, DType::f32),
                        tensor(g, s, DType::f32), h, tensor(pb, s, DType::bf16), dev().stream);
  });
  state.counters["bytes_per_second"] =
      benchmark::Counter(30.0 * static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AdamW)->Arg(std::int64_t{1} << 28)->ArgName("params")->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

namespace {

// --- attention: fused (cuDNN) against unfused, T = 4096, one sequence ------------------------------------
// Args: shape (0 = 1b: 32/8 heads of 64; 1 = seed-oss-36b: 80/8 heads of 128), kernel (0 = fused, 1 = unfused),
// pass (0 = forward, 1 = backward). FLOPs counted for the causal half: forward QKᵀ and PV, 2·T²·D per head;
// backward 2.5 times that (the recomputed QKᵀ and four products).
void BM_Attention(benchmark::State& state) {
  const bool big = state.range(0) == 1;
  const kernels::AttentionImpl impl = state.range(1) == 0 ? kernels::AttentionImpl::fused : kernels::AttentionImpl::unfused;
  const bool backward = state.range(2) == 1;
  const kernels::AttentionDims d{1, kTokens, big ? 80 : 32, 8, big ? 128 : 64};
  const Shape qs{d.batch, d.seq, d.heads, d.head_dim}, ks{d.batch, d.seq, d.kv_heads, d.head_dim};
  const Shape ls{d.batch, d.heads, d.seq};
  auto alloc = [](Shape s, DType t) { return dev().alloc.allocate(static_cast<std::size_t>(s.numel()) * dtype_size(t),
                                                                  AllocationTag::activation); };
  Allocation q = alloc(qs, DType::bf16), k = alloc(ks, DType::bf16), v = alloc(ks, DType::bf16);
  Allocation o = alloc(qs, DType::bf16), dout = alloc(qs, DType::bf16), lse = alloc(ls, DType::f32);
  Allocation dq = alloc(qs, DType::bf16), dk = alloc(ks, DType::bf16), dv = alloc(ks, DType::bf16);
  fill_random(tensor(q, qs, DType::bf16), 1.f, 7);
  fill_random(tensor(k, ks, DType::bf16), 1.f, 8);
  fill_random(tensor(v, ks, DType::bf16), 1.f, 9);
  fill_random(tensor(dout, qs, DType::bf16), 1.f, 10);
  const std::size_t nw = backward ? kernels::attention_bwd_workspace_bytes(d, DType::bf16, Device::cuda(0), impl)
                                  : kernels::attention_fwd_workspace_bytes(d, DType::bf16, Device::cuda(0), impl);
  Allocation w = dev().alloc.allocate(std::max<std::size_t>(nw, 1), AllocationTag::workspace);
  const std::span<std::byte> ws(static_cast<std::byte*>(w.data()), nw);
  auto fwd = [&] {
    kernels::attention_fwd(tensor(o, qs, DType::bf16), tensor(lse, ls, DType::f32), tensor(q, qs, DType::bf16),
                           tensor(k, ks, DType::bf16), tensor(v, ks, DType::bf16), d, ws, dev().stream, impl);
  };
  if (backward) {
    fwd();
    run_timed(state, [&] {
      kernels::attention_bwd(tensor(dq, qs, DType::bf16), tensor(dk, ks, DType::bf16), tensor(dv, ks, DType::bf16),
                             tensor(dout, qs, DType::bf16), tensor(q, qs, DType::bf16), tensor(k, ks, DType::bf16),
                             tensor(v, ks, DType::bf16), tensor(o, qs, DType::bf16), tensor(lse, ls, DType::f32), d, ws,
                             dev().stream, impl);
    });
  } else {
    run_timed(state, fwd);
  }
  const double fwd_flops = 2.0 * static_cast<double>(d.seq) * static_cast<double>(d.seq) *
                           static_cast<double>(d.heads * d.head_dim);
  state.counters["TFLOP/s_causal"] = benchmark::Counter((backward ? 2.5 : 1.0) * fwd_flops * 1e-12,
                                                        benchmark::Counter::kIsIterationInvariantRate);
  state.counters["workspace_MiB"] = static_cast<double>(nw) / (1 << 20);
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}})
    ->ArgNames({"seed_oss_36b", "unfused", "backward"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

namespace {

// --- blocked attention: one pair of ring attention's blocks, 1b heads (32/8 × 64), bf16 ------------------------
// A block is a context-parallel chunk: sequence 4096 over cp = 2 is 4 chunks of 1024 tokens. Args: pair (0 = the
// causal diagonal, 1 = an off-diagonal pair, every key visible), pass (0 = attention_block_fwd into a running
// state, 1 = attention_block_bwd adding into dq, dk, dv). FLOPs: 4·Tq·Tk·H·D for a whole pair's forward (half on
// the diagonal), the backward 2.5 times that, as BM_Attention counts.
void BM_AttentionBlock(benchmark::State& state) {
  constexpr std::int64_t kChunk = 1024;
  const bool diagonal = state.range(0) == 0, backward = state.range(1) == 1;
  const kernels::AttentionBlock blk{1, kChunk, kChunk, 32, 8, 64, 2 * kChunk, diagonal ? 2 * kChunk : 0, true};
  const Shape qs{1, kChunk, blk.heads, blk.head_dim}, ks{1, kChunk, blk.kv_heads, blk.head_dim};
  const Shape ls{1, blk.heads, kChunk};
  auto alloc = [](Shape s, DType t) { return dev().alloc.allocate(static_cast<std::size_t>(s.numel()) * dtype_size(t),
                                                                  AllocationTag::activation); };
  Allocation q = alloc(qs, DType::bf16), k = alloc(ks, DType::bf16), v = alloc(ks, DType::bf16);
  Allocation dout = alloc(qs, DType::bf16), o = alloc(qs, DType::bf16), lse = alloc(ls, DType::f32);
  Allocation acc = alloc(qs, DType::f32), m = alloc(ls, DType::f32), l = alloc(ls, DType::f32);
  Allocation delta = alloc(ls, DType::f32);
  Allocation dq = alloc(qs, DType::bf16), dk = alloc(ks, DType::bf16), dv = alloc(ks, DType::bf16);
  fill_random(tensor(q, qs, DType::bf16), 1.f, 17);
  fill_random(tensor(k, ks, DType::bf16), 1.f, 18);
  fill_random(tensor(v, ks, DType::bf16), 1.f, 19);
  fill_random(tensor(dout, qs, DType::bf16), 1.f, 20);
  const std::size_t nw = backward ? kernels::attention_block_bwd_workspace_bytes(blk, DType::bf16, Device::cuda(0))
                                  : kernels::attention_block_fwd_workspace_bytes(blk, DType::bf16, Device::cuda(0));
  Allocation w = dev().alloc.allocate(nw, AllocationTag::workspace);
  const std::span<std::byte> ws(static_cast<std::byte*>(w.data()), nw);
  const StreamRef s = dev().stream;
  kernels::attention_block_state_init(tensor(acc, qs, DType::f32), tensor(m, ls, DType::f32),
                                      tensor(l, ls, DType::f32), blk.q_dims(), s);
  auto fwd = [&] {
    kernels::attention_block_fwd(tensor(acc, qs, DType::f32), tensor(m, ls, DType::f32), tensor(l, ls, DType::f32),
                                 tensor(q, qs, DType::bf16), tensor(k, ks, DType::bf16), tensor(v, ks, DType::bf16), blk,
                                 ws, s);
  };
  if (backward) {
    const std::size_t nf = kernels::attention_block_fwd_workspace_bytes(blk, DType::bf16, Device::cuda(0));
    Allocation wf = dev().alloc.allocate(nf, AllocationTag::workspace);
    kernels::attention_block_fwd(tensor(acc, qs, DType::f32), tensor(m, ls, DType::f32), tensor(l, ls, DType::f32),
                                 tensor(q, qs, DType::bf16), tensor(k, ks, DType::bf16), tensor(v, ks, DType::bf16), blk,
                                 {static_cast<std::byte*>(wf.data()), nf}, s);
    kernels::attention_block_finish(tensor(o, qs, DType::bf16), tensor(lse, ls, DType::f32), tensor(acc, qs, DType::f32),
                                    tensor(m, ls, DType::f32), tensor(l, ls, DType::f32), blk.q_dims(), s);
    kernels::attention_row_delta(tensor(delta, ls, DType::f32), tensor(dout, qs, DType::bf16), tensor(o, qs, DType::bf16),
                                 blk.q_dims(), s);
    run_timed(state, [&] {
      kernels::attention_block_bwd(tensor(dq, qs, DType::bf16), tensor(dk, ks, DType::bf16),
                                   tensor(dv, ks, DType::bf16), tensor(dout, qs, DType::bf16),
                                   tensor(q, qs, DType::bf16), tensor(k, ks, DType::bf16), tensor(v, ks, DType::bf16),
                                   tensor(lse, ls, DType::f32), tensor(delta, ls, DType::f32), blk,
                                   {.dq = true, .dkv = true}, ws, s);
    });
  } else {
    run_timed(state, fwd);
  }
  const double pair_flops = 4.0 * static_cast<double>(kChunk * kChunk) * static_cast<double>(blk.heads * blk.head_dim);
  const double fwd_flops = diagonal ? pair_flops / 2 : pair_flops;
  state.counters["TFLOP/s_visible"] = benchmark::Counter((backward ? 2.5 : 1.0) * fwd_flops * 1e-12,
                                                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["workspace_MiB"] = static_cast<double>(nw) / (1 << 20);
}
BENCHMARK(BM_AttentionBlock)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"off_diagonal", "backward"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
