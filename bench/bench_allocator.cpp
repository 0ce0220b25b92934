// Caching allocator vs plain malloc/free on a training-like allocation pattern: per step,
// activations of a few sizes pile up unit by unit in forward and are freed in reverse in backward,
// each unit gets a gradient buffer kept to the end of the step, and transient communication buffers
// of several sizes come and go around every unit. Reports allocations per second (items/s).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "hzp/core/caching_allocator.hpp"

namespace {

using hzp::AllocationTag;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr int kUnits = 8;
// Activations saved per unit: a norm output, an attention output, an MLP hidden state.
constexpr std::array<std::size_t, 3> kActivation = {96 * KiB, 1536 * KiB, 6 * MiB};
constexpr std::size_t kGradPerUnit = 3 * MiB + 512 * KiB;
// Transient buffers: parameter all-gather, gradient reduce-scatter staging, kernel workspace.
constexpr std::size_t kAllGather = 2 * MiB + 256 * KiB;
constexpr std::size_t kReduceScatter = 3 * MiB + 512 * KiB;
constexpr std::size_t kWorkspace = 256 * KiB;
constexpr std::size_t kLossReduce = 4 * KiB;

// Writes one byte per 4 KiB page, as a kernel filling the buffer would make the OS fault it in.
void touch(void* p, std::size_t bytes) {
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t off = 0; off < bytes; off += 4096) c[off] = 1;
}

struct MallocPolicy {
  void* alloc(std::size_t bytes, AllocationTag) { return std::malloc(bytes); }
  void free(void* p) { std::free(p); }
};

struct CachingPolicy {
  hzp::CachingAllocator* al;
  void* alloc(std::size_t bytes, AllocationTag tag) { return al->allocate_raw(bytes, tag); }
  void free(void* p) { al->free_raw(p); }
};

// One training step; returns the number of allocations it made.
template <typename Policy>
int training_step(Policy& pol, bool write) {
  std::array<void*, kUnits * kActivation.size()> acts{};
  std::array<void*, kUnits> grads{};
  int n = 0;
  auto get = [&](std::size_t bytes, AllocationTag tag) {
    void* p = pol.alloc(bytes, tag);
    if (write) touch(p, bytes);
    benchmark::DoNotOptimize(p);
    ++n;
    return p;
  };
  auto transient = [&](std::size_t bytes, AllocationTag tag) { pol.free(get(bytes, tag)); };

  for (int u = 0; u < kUnits; ++u) {  // forward
    void* ag = get(kAllGather, AllocationTag::comm);
    for (std::size_t k = 0; k < kActivation.size(); ++k) {
      transient(kWorkspace, AllocationTag::workspace);
      acts[u * kActivation.size() + k] = get(kActivation[k], AllocationTag::activation);
    }
    pol.free(ag);
  }
  for (int u = kUnits - 1; u >= 0; --u) {  // backward, freeing activations in reverse
    void* ag = get(kAllGather, AllocationTag::comm);
    grads[u] = get(kGradPerUnit, AllocationTag::grad);
    for (int k = static_cast<int>(kActivation.size()) - 1; k >= 0; --k) {
      transient(kWorkspace, AllocationTag::workspace);
      pol.free(acts[u * kActivation.size() + k]);
    }
    pol.free(ag);
    transient(kReduceScatter, AllocationTag::comm);
  }
  transient(kLossReduce, AllocationTag::comm);
  for (void* g : grads) pol.free(g);
  return n;
}

void BM_TrainingStep_Malloc(benchmark::State& state) {
  MallocPolicy pol;
  const bool write = state.range(0) != 0;
  std::int64_t items = 0;
  for (auto _ : state) items += training_step(pol, write);
  state.SetItemsProcessed(items);
}

// Shared by the threads of a multi-threaded run, as the compute and comm threads of a rank would.
hzp::CachingAllocator& shared_allocator() {
  static hzp::HostBacking backing;
  static hzp::CachingAllocator allocator(backing);
  return allocator;
}

// Each run starts from an empty cache, so its counters describe that run alone.
void reset_shared_allocator(const benchmark::State&) {
  shared_allocator().empty_cache();
  shared_allocator().reset_peaks();
}

void BM_TrainingStep_Caching(benchmark::State& state) {
  CachingPolicy pol{&shared_allocator()};
  const bool write = state.range(0) != 0;
  training_step(pol, write);  // warm the cache outside the timed loop
  hzp::AllocatorStats before;
  bool first = true;
  std::int64_t items = 0;
  for (auto _ : state) {
    // Read after the loop's start barrier, once every thread has warmed up.
    if (first && state.thread_index() == 0) before = pol.al->stats();
    first = false;
    items += training_step(pol, write);
  }
  state.SetItemsProcessed(items);
  if (state.thread_index() == 0) {
    const auto s = pol.al->stats();
    state.counters["peak_reserved_MiB"] = static_cast<double>(s.peak_reserved_bytes) / MiB;
    state.counters["peak_alloc_MiB"] = static_cast<double>(s.peak_allocated_bytes) / MiB;
    // Steady state should need no backing call at all: this is what makes cudaMalloc affordable.
    state.counters["backing_allocs_in_loop"] =
        static_cast<double>(s.num_backing_allocs - before.num_backing_allocs);
  }
}

BENCHMARK(BM_TrainingStep_Malloc)
    ->ArgName("touch")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_TrainingStep_Caching)
    ->ArgName("touch")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Setup(reset_shared_allocator);

}  // namespace

BENCHMARK_MAIN();
