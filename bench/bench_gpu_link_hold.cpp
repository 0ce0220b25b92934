// The cost of link emulation on a GPU (docs/cuda.md "Link emulation on the GPU"): each emulated collective
// brackets its communication-stream work with two host functions (GpuLinkHold::start / finish). With a
// modelled time of zero nothing is slept, so what is left is the mechanism: the device-side time a pair
// adds to the stream (the runtime's callback thread is woken twice), and the host time to enqueue a pair.
// A stream of plain events is the reference beside it.
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "gpu_bench_main.hpp"
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/core/device.hpp"
#include "hzp/core/stream.hpp"

namespace {

using namespace hzp;

constexpr int kPairs = 200;

// Arg 1: kPairs GpuLinkHold pairs per iteration; arg 0: the same number of untimed event records (reference).
void BM_GpuLinkHold(benchmark::State& state) {
  const bool hold = state.range(0) == 1;
  Stream stream(Device::cuda(0));
  std::vector<coll::GpuLinkHold> holds(kPairs);
  std::vector<Event> marks;
  for (int i = 0; i < kPairs; ++i) marks.emplace_back(Device::cuda(0));
  TimedEvent t0(Device::cuda(0)), t1(Device::cuda(0));
  double enqueue_s = 0;
  for (auto _ : state) {
    t0.record(stream);
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kPairs; ++i) {
      if (hold) {
        holds[static_cast<std::size_t>(i)].start(stream.ref());
        holds[static_cast<std::size_t>(i)].finish(stream.ref(), 0.0);
      } else {
        marks[static_cast<std::size_t>(i)].record(stream.ref());
      }
    }
    enqueue_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    t1.record(stream);
    t1.synchronize();
    state.SetIterationTime(TimedEvent::elapsed_ms(t0, t1) * 1e-3);
  }
  state.SetLabel(hold ? "GpuLinkHold pair (modelled 0 s)" : "event record (reference)");
  state.counters["stream_us_per_item"] =
      benchmark::Counter(kPairs * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["host_enqueue_us_per_item"] = enqueue_s * 1e6 / (static_cast<double>(state.iterations()) * kPairs);
}
BENCHMARK(BM_GpuLinkHold)->Arg(0)->Arg(1)->ArgName("hold")->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
