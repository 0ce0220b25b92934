// Benchmarks of the CPU kernels' exponentials, each beside the scalar reference it replaced: std::exp over an array
// against the vectorised exp8 (kernels/common/exp_simd.hpp) in its AVX2 and baseline x86-64 builds, and on the
// shapes of one `small` micro-batch (256 tokens) the cross-entropy forward+backward (V = 8,192; the scalar
// reference cross_entropy_ref.hpp, the production path before issue 26, against the launcher) and SwiGLU forward
// and backward (F = 1,408). Single-threaded (one rank on one core, as one_core_main.hpp holds OpenBLAS; the
// intra-op pool keeps its default of one thread here). Rates from the problem size: elements/s, bytes/s.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "common/softmax_simd.hpp"
#include "cross_entropy/cross_entropy_ref.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/kernels/cpu_isa.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/swiglu.hpp"
#include "one_core_main.hpp"
#include "swiglu/swiglu_ref.hpp"

namespace {

using hzp::ConstTensorView;
using hzp::DType;
using hzp::Shape;
using hzp::StreamRef;
using hzp::TensorView;
using hzp::kernels::CpuIsa;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void elements_rate(benchmark::State& state, std::int64_t n) {
  state.counters["elements_per_second"] = benchmark::Counter(
      static_cast<double>(n) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

/// Chooses the build the kernels dispatch to for one benchmark, or skips it where the CPU cannot run it.
class IsaScope {
 public:
  IsaScope(benchmark::State& state, CpuIsa isa) {
    if (!hzp::kernels::cpu_isa_supported(isa)) {
      state.SkipWithError("this CPU cannot run the requested build");
      return;
    }
    before_ = hzp::kernels::set_cpu_isa(isa);
  }
  ~IsaScope() { hzp::kernels::set_cpu_isa(before_); }

 private:
  CpuIsa before_ = hzp::kernels::cpu_isa();
};

// --- exp over an array of arguments in the softmax range [−20, 0] --------------------------------------------

void BM_ExpStd(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto x = random_floats(static_cast<std::size_t>(n), 1, -20.0f, 0.0f);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
    benchmark::ClobberMemory();
  }
  elements_rate(state, n);
}

void BM_ExpSimd(benchmark::State& state, CpuIsa isa) {
  IsaScope scope(state, isa);
  const std::int64_t n = state.range(0);
  const auto x = random_floats(static_cast<std::size_t>(n), 1, -20.0f, 0.0f);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    hzp::kernels::simd::exp(y.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  elements_rate(state, n);
}

BENCHMARK(BM_ExpStd)->Arg(8192)->ArgName("n");
BENCHMARK_CAPTURE(BM_ExpSimd, avx2, CpuIsa::avx2)->Arg(8192)->ArgName("n");
BENCHMARK_CAPTURE(BM_ExpSimd, baseline, CpuIsa::baseline)->Arg(8192)->ArgName("n");

// --- cross-entropy forward+backward, fp32 -------------------------------------------------------------------

struct CrossEntropyProblem {
  std::int64_t N, V;
  std::vector<float> logits, dlogits, losses;
  std::vector<std::int32_t> targets;
  hzp::kernels::CrossEntropyGrad grad;

  CrossEntropyProblem(std::int64_t n, std::int64_t v)
      : N(n), V(v), logits(random_floats(static_cast<std::size_t>(n * v), 2, -8.0f, 8.0f)),
        dlogits(logits.size()), losses(static_cast<std::size_t>(n)), targets(static_cast<std::size_t>(n)),
        grad{-1, static_cast<double>(n), 1.0} {
    for (std::int64_t i = 0; i < N; ++i) targets[i] = static_cast<std::int32_t>((i * 7919) % V);
  }
  void bytes_rate(benchmark::State& state) const {  // every logit read once, every gradient written once
    state.counters["bytes_per_second"] = benchmark::Counter(
        2.0 * static_cast<double>(N * V) * sizeof(float) * static_cast<double>(state.iterations()),
        benchmark::Counter::kIsRate);
  }
};

void BM_CrossEntropyRef(benchmark::State& state) {
  CrossEntropyProblem p(state.range(1), state.range(0));
  for (auto _ : state) {
    const auto r = hzp::kernels::cross_entropy_fwd_bwd_ref<float>(p.losses.data(), p.dlogits.data(), p.logits.data(),
                                                                  p.targets.data(), p.N, p.V, p.grad);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  p.bytes_rate(state);
}

void BM_CrossEntropy(benchmark::State& state, CpuIsa isa) {
  IsaScope scope(state, isa);
  CrossEntropyProblem p(state.range(1), state.range(0));
  for (auto _ : state) {
    const auto r = hzp::kernels::cross_entropy_fwd_bwd(
        TensorView(p.losses.data(), Shape{p.N}, DType::f32), TensorView(p.dlogits.data(), Shape{p.N, p.V}, DType::f32),
        ConstTensorView(p.logits.data(), Shape{p.N, p.V}, DType::f32),
        ConstTensorView(p.targets.data(), Shape{p.N}, DType::i32), p.grad, StreamRef::host());
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  p.bytes_rate(state);
}

BENCHMARK(BM_CrossEntropyRef)->Args({8192, 256})->ArgNames({"V", "N"})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CrossEntropy, avx2, CpuIsa::avx2)
    ->Args({8192, 256})
    ->ArgNames({"V", "N"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CrossEntropy, baseline, CpuIsa::baseline)
    ->Args({8192, 256})
    ->ArgNames({"V", "N"})
    ->Unit(benchmark::kMillisecond);

// --- SwiGLU forward then backward, fp32 ---------------------------------------------------------------------

struct SwiGluProblem {
  std::int64_t n;
  std::vector<float> gate, up, dout, out, dgate, dup;
  explicit SwiGluProblem(std::int64_t elems)
      : n(elems), gate(random_floats(static_cast<std::size_t>(n), 3, -6.0f, 6.0f)),
        up(random_floats(static_cast<std::size_t>(n), 4, -1.0f, 1.0f)),
        dout(random_floats(static_cast<std::size_t>(n), 5, -1.0f, 1.0f)), out(up.size()), dgate(up.size()),
        dup(up.size()) {}
};

void BM_SwiGluRef(benchmark::State& state) {
  SwiGluProblem p(state.range(0) * state.range(1));
  for (auto _ : state) {
    hzp::kernels::swiglu_fwd_ref(p.out.data(), p.gate.data(), p.up.data(), p.n);
    hzp::kernels::swiglu_bwd_ref(p.dgate.data(), p.dup.data(), p.dout.data(), p.gate.data(), p.up.data(), p.n);
    benchmark::ClobberMemory();
  }
  elements_rate(state, p.n);
}

void BM_SwiGlu(benchmark::State& state, CpuIsa isa) {
  IsaScope scope(state, isa);
  SwiGluProblem p(state.range(0) * state.range(1));
  const Shape s{state.range(0), state.range(1)};
  for (auto _ : state) {
    hzp::kernels::swiglu_fwd(TensorView(p.out.data(), s, DType::f32), ConstTensorView(p.gate.data(), s, DType::f32),
                             ConstTensorView(p.up.data(), s, DType::f32), StreamRef::host());
    hzp::kernels::swiglu_bwd(TensorView(p.dgate.data(), s, DType::f32), TensorView(p.dup.data(), s, DType::f32),
                             ConstTensorView(p.dout.data(), s, DType::f32),
                             ConstTensorView(p.gate.data(), s, DType::f32), ConstTensorView(p.up.data(), s, DType::f32),
                             StreamRef::host());
    benchmark::ClobberMemory();
  }
  elements_rate(state, p.n);
}

BENCHMARK(BM_SwiGluRef)->Args({256, 1408})->ArgNames({"T", "F"})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SwiGlu, avx2, CpuIsa::avx2)
    ->Args({256, 1408})
    ->ArgNames({"T", "F"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SwiGlu, baseline, CpuIsa::baseline)
    ->Args({256, 1408})
    ->ArgNames({"T", "F"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return hzp::bench::run_on_one_core(argc, argv); }
