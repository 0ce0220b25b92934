// A whole training step of the `1b` preset (sequence 4096, bf16-mixed, the preset's micro-batch of 1) on
// one GPU through the `none` scheduler on a CUDA stream, as `hzpbench run --set backend=cuda` runs it (every
// kernel's CUDA twin, parameters, gradients and Adam state in device memory): tokens/s and MFU under both
// FLOP conventions (causal attention counted in full, and halved) against 989 TFLOP/s, the dense bf16
// peak of an H100 SXM (state.counters name it). Arg: micro-batches per step (the preset's 256 would take
// minutes per step; 8 gives the same per-token rate, the optimizer amortised over 8 sequences), and the
// attention kernel (0 = auto: cuDNN's fused kernel where it runs; 1 = the unfused kernels), side by side.
// BM_Step1bEngine runs the same step through the data-parallel engines at one rank (a one-rank NCCL group):
// what each engine's bookkeeping, collectives and buffers cost against `none` on the same shape; asynchzp async
// (two background threads, each with its stream) and inline. Every engine reports exposed_comm_ms: the compute
// stream's stalls on communication per step, timed on the device (StepStats::device_comm_wait_seconds, what
// `hzpbench run` writes as exposed_comm_s on a GPU), the mean over the timed steps. A third argument holds every
// collective's communication stream for at least that many microseconds (NcclCommConfig::min_hold_s): a one-rank
// group has no rounds for the link model, so this stands in for a slow link on one GPU, and the zero3 / asynchzp
// async / inline rows with it are the "exposed communication and step time" comparison.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <string_view>

#include "gpu_bench_main.hpp"
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/schedulers/asynchzp.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/data/markov_source.hpp"
#include "hzp/workloads/presets.hpp"

namespace {

using namespace hzp;

constexpr double kPeakTflops = 989.0;  // H100 SXM dense bf16
constexpr const char* kEngines[] = {"none", "ddp", "zero1", "zero2", "zero3", "asynchzp", "asynchzp-inline"};

void run_step(benchmark::State& state, std::int64_t micro_batches, kernels::AttentionImpl attention,
              const char* engine, double hold_us = 0) {
  const auto& preset = workloads::model_preset("1b");
  workloads::TrainConfig train = preset.train;
  train.global_batch = micro_batches * train.micro_batch_size;
  CudaBacking backing(0);
  CachingAllocator alloc(backing);
  Stream stream(Device::cuda(0));
  workloads::LlamaConfig shape = preset.model;
  shape.attention = attention;
  const auto model = workloads::make_llama(shape, train.precision);
  workloads::MarkovChainParams chain = preset.chain;
  if (chain.vocab == 0) chain.vocab = preset.model.vocab;
  const workloads::MarkovSource source(chain, preset.model.seq_len);
  train.steps = 1 + static_cast<std::int64_t>(state.max_iterations);
  // The preset's learning-rate warm-up (100 steps) is longer than the few steps timed here; it changes the
  // learning rate's value, not the work of a step.
  train.warmup_steps = std::min(train.warmup_steps, train.steps);
  schedulers::SchedulerArgs args;
  args.model = model.get();
  args.train = train;
  args.allocator = &alloc;
  args.stream = stream.ref();
  const bool inline_form = std::string_view(engine) == "asynchzp-inline";
  args.options.async = !inline_form;
  coll::SelfBootstrap solo;
  std::unique_ptr<coll::NcclCommunicator> world;
  if (std::string_view(engine) != "none") {
    coll::NcclCommConfig config;  // cuda:0, no link emulation
    config.device = 0;
    config.min_hold_s = hold_us * 1e-6;
    world = std::make_unique<coll::NcclCommunicator>(solo, config);
    args.world = world.get();
  }
  const auto trainer = schedulers::make_scheduler(inline_form ? "asynchzp" : engine, args);
  std::int64_t step = 0;
  trainer->step({step++, &source});  // warm-up: cuBLASLt heuristics, the allocator's segments
  TimedEvent t0(Device::cuda(0)), t1(Device::cuda(0));
  double exposed_s = 0;
  for (auto _ : state) {
    t0.record(stream);
    exposed_s += trainer->step({step++, &source}).device_comm_wait_seconds;
    t1.record(stream);
    t1.synchronize();
    state.SetIterationTime(TimedEvent::elapsed_ms(t0, t1) * 1e-3);
  }
  const double tokens = static_cast<double>(train.global_batch * preset.model.seq_len);
  const workloads::FlopsPerToken f = model->flops_per_token();
  state.counters["tokens_per_second"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MFU_full_attention"] =
      benchmark::Counter(tokens * f.full_attention / (kPeakTflops * 1e12), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MFU_causal_attention"] = benchmark::Counter(
      tokens * f.causal_attention / (kPeakTflops * 1e12), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_TFLOPs_used"] = kPeakTflops;
  state.counters["peak_reserved_GiB"] = static_cast<double>(alloc.stats().peak_reserved_bytes) / (1 << 30);
  state.counters["exposed_comm_ms"] = exposed_s * 1e3 / static_cast<double>(state.iterations());
  state.counters["hold_us"] = hold_us;
  state.SetLabel(engine);
}

void BM_Step1b(benchmark::State& state) {
  run_step(state, state.range(0),
           state.range(1) == 0 ? kernels::AttentionImpl::automatic : kernels::AttentionImpl::unfused, "none");
}

void BM_Step1bEngine(benchmark::State& state) {
  run_step(state, state.range(0), kernels::AttentionImpl::automatic, kEngines[state.range(1)],
           static_cast<double>(state.range(2)));
}
BENCHMARK(BM_Step1bEngine)
    ->Args({8, 0, 0})
    ->Args({8, 1, 0})
    ->Args({8, 2, 0})
    ->Args({8, 3, 0})
    ->Args({8, 4, 0})
    ->Args({8, 5, 0})
    ->Args({8, 6, 0})
    ->Args({8, 4, 500})  // zero3, asynchzp async and inline with every collective held 500 us
    ->Args({8, 5, 500})
    ->Args({8, 6, 500})
    ->ArgNames({"micro_batches", "engine", "hold_us"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_Step1b)
    ->Args({8, 0})
    ->Args({8, 1})
    ->ArgNames({"micro_batches", "unfused_attention"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
