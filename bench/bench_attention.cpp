// Benchmarks of CPU attention (forward and backward, fp32, Llama-like H = 8, KV = 2, D = 64): the tiled
// production path behind the launchers (BM_Attention*) side by side with the scalar reference it is tested
// against (BM_AttentionRef*), with tokens/s and GFLOP/s from the problem size; and of the fused softmax
// cross-entropy forward+backward with the bytes/s of logits read and dlogits written (V = 32k and Llama 3's
// 155,136). Single-threaded: OpenBLAS is held to one thread (main), as one rank per core sees it.
// BM_AttentionDocuments: forward + backward of small's attention (H = 8, KV = 4, D = 64) on one step's eight
// sequences with their packed documents (data.packing = documents, mean_tokens = 0: none), the cost packing
// changes; scripts/packing_bench turns it into attention's share of a step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>


#include "attention/attention_ref.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/workloads/data/document_packing.hpp"
#include "one_core_main.hpp"

namespace {

using hzp::ConstTensorView;
using hzp::DType;
using hzp::Shape;
using hzp::StreamRef;
using hzp::TensorView;
using hzp::kernels::AttentionDims;

template <typename T>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(gen));
  return v;
}

AttentionDims llama_dims(const benchmark::State& state) {
  return {state.range(0), state.range(1), /*heads=*/8, /*kv_heads=*/2, /*head_dim=*/64};
}

/// Score pairs (i, j ≤ i) over every batch and head: the causal half of the T×T matrix.
double causal_pairs(const AttentionDims& d) {
  return static_cast<double>(d.batch * d.heads) * static_cast<double>(d.seq) * static_cast<double>(d.seq + 1) / 2;
}

/// Buffers of one attention problem, allocated once outside the timed loop.
struct AttentionProblem {
  AttentionDims d;
  Shape qs, kvs, ls;
  std::vector<float> q, k, v, out, dout, dq, dk, dv, lse;
  std::vector<std::byte> ws;

  explicit AttentionProblem(const AttentionDims& dims)
      : d(dims),
        qs{d.batch, d.seq, d.heads, d.head_dim},
        kvs{d.batch, d.seq, d.kv_heads, d.head_dim},
        ls{d.batch, d.heads, d.seq},
        q(random_vector<float>(qs.numel(), 1, 1.0f)),
        k(random_vector<float>(kvs.numel(), 2, 1.0f)),
        v(random_vector<float>(kvs.numel(), 3, 1.0f)),
        out(qs.numel()),
        dout(random_vector<float>(qs.numel(), 4, 1.0f)),
        dq(qs.numel()),
        dk(kvs.numel()),
        dv(kvs.numel()),
        lse(ls.numel()),
        ws(std::max(hzp::kernels::attention_fwd_workspace_bytes(d, DType::f32),
                    hzp::kernels::attention_bwd_workspace_bytes(d, DType::f32))) {}

  void forward(std::span<const std::int32_t> first = {}) {
    hzp::kernels::attention_fwd(TensorView(out.data(), qs, DType::f32), TensorView(lse.data(), ls, DType::f32),
                                ConstTensorView(q.data(), qs, DType::f32), ConstTensorView(k.data(), kvs, DType::f32),
                                ConstTensorView(v.data(), kvs, DType::f32), d, ws, StreamRef::host(),
                                hzp::kernels::AttentionImpl::automatic, first);
  }
  void backward(std::span<const std::int32_t> first = {}) {
    hzp::kernels::attention_bwd(TensorView(dq.data(), qs, DType::f32), TensorView(dk.data(), kvs, DType::f32),
                                TensorView(dv.data(), kvs, DType::f32), ConstTensorView(dout.data(), qs, DType::f32),
                                ConstTensorView(q.data(), qs, DType::f32), ConstTensorView(k.data(), kvs, DType::f32),
                                ConstTensorView(v.data(), kvs, DType::f32), ConstTensorView(out.data(), qs, DType::f32),
                                ConstTensorView(lse.data(), ls, DType::f32), d, ws, StreamRef::host(),
                                hzp::kernels::AttentionImpl::automatic, first);
  }
};

void set_attention_counters(benchmark::State& state, const AttentionDims& d, double flops_per_pair) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(d.batch * d.seq) * iters, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(causal_pairs(d) * flops_per_pair * iters / 1e9, benchmark::Counter::kIsRate);
}

void BM_AttentionFwd(benchmark::State& state) {
  AttentionProblem p(llama_dims(state));
  for (auto _ : state) {
    p.forward();
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  // Per causal pair: q·k (2D) and p·v (2D).
  set_attention_counters(state, p.d, 4.0 * static_cast<double>(p.d.head_dim));
}

void BM_AttentionBwd(benchmark::State& state) {
  AttentionProblem p(llama_dims(state));
  p.forward();
  for (auto _ : state) {
    p.backward();
    benchmark::DoNotOptimize(p.dq.data());
    benchmark::ClobberMemory();
  }
  // Per causal pair: the recomputed q·k, dout·v, and the dq, dk, dv updates (2D each): the 2.5× of
  // the forward that FlashAttention's FLOP count also uses.
  set_attention_counters(state, p.d, 10.0 * static_cast<double>(p.d.head_dim));
}

/// The scalar references on the same problem (their own, smaller workspace).
void BM_AttentionRefFwd(benchmark::State& state) {
  AttentionProblem p(llama_dims(state));
  std::vector<float> work(static_cast<std::size_t>(hzp::kernels::attention_fwd_workspace_elems(p.d)));
  for (auto _ : state) {
    hzp::kernels::attention_fwd_ref<float>(p.out.data(), p.lse.data(), p.q.data(), p.k.data(), p.v.data(), p.d,
                                           work.data());
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  set_attention_counters(state, p.d, 4.0 * static_cast<double>(p.d.head_dim));
}

void BM_AttentionRefBwd(benchmark::State& state) {
  AttentionProblem p(llama_dims(state));
  p.forward();
  std::vector<float> work(static_cast<std::size_t>(hzp::kernels::attention_bwd_workspace_elems(p.d)));
  for (auto _ : state) {
    hzp::kernels::attention_bwd_ref<float>(p.dq.data(), p.dk.data(), p.dv.data(), p.dout.data(), p.q.data(),
                                           p.k.data(), p.v.data(), p.out.data(), p.lse.data(), p.d, work.data());
    benchmark::DoNotOptimize(p.dq.data());
    benchmark::ClobberMemory();
  }
  set_attention_counters(state, p.d, 10.0 * static_cast<double>(p.d.head_dim));
}

/// One step of small (8 sequences of T tokens, samples 0..7) with documents of mean length range(1) (0: none):
/// forward then backward of each sequence; the counter pairs/s counts the visible pairs (per head).
void BM_AttentionDocuments(benchmark::State& state) {
  const std::int64_t T = state.range(0);
  AttentionProblem p({1, T, /*heads=*/8, /*kv_heads=*/4, /*head_dim=*/64});
  hzp::workloads::DocumentPacking packing;
  if (state.range(1) > 0) {
    packing.kind = hzp::workloads::PackingKind::documents;
    packing.mean_tokens = static_cast<double>(state.range(1));
  }
  std::vector<std::vector<std::int32_t>> firsts(8, std::vector<std::int32_t>(static_cast<std::size_t>(T)));
  double pairs = 0;
  for (std::int64_t i = 0; i < 8; ++i) {
    const std::vector<std::int32_t> starts = packing.starts(i, T);
    hzp::workloads::document_first_positions(starts, T, firsts[static_cast<std::size_t>(i)]);
    pairs += hzp::workloads::document_causal_pairs(starts, T, 0, T);
  }
  for (auto _ : state)
    for (const auto& f : firsts) {
      const std::span<const std::int32_t> first = packing.enabled() ? std::span<const std::int32_t>(f)
                                                                    : std::span<const std::int32_t>();
      p.forward(first);
      p.backward(first);
      benchmark::ClobberMemory();
    }
  state.counters["pairs/s"] = benchmark::Counter(pairs * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
  state.counters["pair_share"] = pairs / (8.0 * static_cast<double>(T) * static_cast<double>(T + 1) / 2);
}

BENCHMARK(BM_AttentionDocuments)->ArgsProduct({{256, 1024}, {0, 256, 1024, 64}})->ArgNames({"T", "mean"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionFwd)->ArgsProduct({{1, 4}, {64, 256, 1024}})->ArgNames({"B", "T"})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionRefFwd)->ArgsProduct({{1}, {64, 256, 1024}})->ArgNames({"B", "T"})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBwd)->ArgsProduct({{1, 4}, {64, 256, 1024}})->ArgNames({"B", "T"})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionRefBwd)->ArgsProduct({{1}, {64, 256, 1024}})->ArgNames({"B", "T"})->Unit(benchmark::kMillisecond);

/// Fused cross-entropy forward+backward over N tokens of a V-wide vocabulary, logits in T.
template <typename T>
void BM_CrossEntropyFwdBwd(benchmark::State& state) {
  const std::int64_t V = state.range(0), N = state.range(1);
  const DType dt = hzp::dtype_of_v<T>;
  const auto logits = random_vector<T>(static_cast<std::size_t>(N * V), 5, 8.0f);
  std::vector<T> dlogits(logits.size());
  std::vector<float> losses(static_cast<std::size_t>(N));
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  for (std::int64_t n = 0; n < N; ++n) targets[n] = static_cast<std::int32_t>((n * 7919) % V);
  const hzp::kernels::CrossEntropyGrad grad{-1, static_cast<double>(N), 1.0};
  for (auto _ : state) {
    const auto r = hzp::kernels::cross_entropy_fwd_bwd(
        TensorView(losses.data(), Shape{N}, DType::f32), TensorView(dlogits.data(), Shape{N, V}, dt),
        ConstTensorView(logits.data(), Shape{N, V}, dt), ConstTensorView(targets.data(), Shape{N}, DType::i32), grad,
        StreamRef::host());
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  // The compulsory traffic: every logit read once and every gradient written once.
  const double bytes = 2.0 * static_cast<double>(N * V) * sizeof(T);
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK_TEMPLATE(BM_CrossEntropyFwdBwd, float)
    ->ArgsProduct({{32000, 155136}, {4}})
    ->ArgNames({"V", "N"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_CrossEntropyFwdBwd, hzp::bf16)
    ->ArgsProduct({{32000, 155136}, {4}})
    ->ArgNames({"V", "N"})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return hzp::bench::run_on_one_core(argc, argv); }
