// One whole training step of the `small` preset through the single-rank reference scheduler, on one
// core (OpenBLAS limited to one thread): forward and backward of every micro-batch, gradient norm,
// clipping and AdamW. Reports tokens/s and achieved GFLOP/s under both FLOP conventions (causal
// attention counted in full, and halved). Args: precision (0 = fp32, 1 = bf16-mixed) and the number of
// micro-batches per step (small's preset has 8; CTest runs the 1-micro-batch variant to stay short).
#include <benchmark/benchmark.h>

#include <memory>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/workloads/data/markov_source.hpp"
#include "hzp/workloads/presets.hpp"
#include "one_core_main.hpp"

namespace {

using namespace hzp;

void BM_SmallStep(benchmark::State& state) {
  const auto& preset = workloads::model_preset("small");
  workloads::TrainConfig train = preset.train;
  train.precision = state.range(0) == 0 ? workloads::Precision::fp32 : workloads::Precision::bf16_mixed;
  train.global_batch = state.range(1) * train.micro_batch_size;
  // Setup (parameter init, optimizer state, the chain) stays outside the timed loop.
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto model = workloads::make_llama(preset.model, train.precision);
  workloads::MarkovChainParams chain = preset.chain;
  chain.vocab = preset.model.vocab;
  const workloads::MarkovSource source(chain, preset.model.seq_len);
  schedulers::SchedulerArgs args;
  args.model = model.get();
  args.train = train;
  args.allocator = &alloc;
  schedulers::NoneScheduler none(args);

  std::int64_t step = 0;
  double loss = 0;
  for (auto _ : state) {
    // step() has side effects (the update), so nothing needs DoNotOptimize (whose "+m,r" form
    // corrupted a double here with GCC 12 and benchmark 1.7.1).
    loss = none.step({step++, &source}).loss;
  }
  const double tokens = static_cast<double>(train.global_batch * preset.model.seq_len);
  const workloads::FlopsPerToken f = model->flops_per_token();
  using benchmark::Counter;
  state.counters["tokens_per_s"] = Counter(tokens, Counter::kIsIterationInvariantRate);
  state.counters["GFLOP_per_s_full_attn"] = Counter(tokens * f.full_attention * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["GFLOP_per_s_causal_attn"] = Counter(tokens * f.causal_attention * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["params_M"] = static_cast<double>(model->layout().total_numel()) * 1e-6;
  state.counters["peak_activation_MiB"] =
      static_cast<double>(alloc.stats().tag(AllocationTag::activation).peak_requested_bytes) / (1 << 20);
  state.counters["loss"] = loss;
}

BENCHMARK(BM_SmallStep)
    ->ArgNames({"precision", "micro_batches"})
    ->Args({0, 8})
    ->Args({1, 8})
    ->Args({0, 1})
    ->Unit(benchmark::kSecond);  // rates per CPU second: one thread, so robust to a busy machine

}  // namespace

int main(int argc, char** argv) { return hzp::bench::run_on_one_core(argc, argv); }
