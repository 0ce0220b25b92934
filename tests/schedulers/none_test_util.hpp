// Helpers for the `none` scheduler tests: build a preset's model, its synthetic data source and the
// scheduler, and run a number of steps, returning each step's statistics.
#pragma once

#include <memory>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/workloads/data/markov_source.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::test {

/// Scheduler arguments over a test setup's `model`, `train` and `alloc` members (no communicator).
template <typename Setup>
schedulers::SchedulerArgs scheduler_args(const Setup& s) {
  schedulers::SchedulerArgs a;
  a.model = s.model.get();
  a.train = s.train;
  a.allocator = s.alloc.get();
  return a;
}

/// One training setup: a model, its data and the none scheduler over them, all owned here.
struct NoneRun {
  workloads::LlamaConfig model_config;
  workloads::TrainConfig train;
  workloads::MarkovChainParams chain;
  HostBacking backing;
  std::unique_ptr<CachingAllocator> alloc;
  std::unique_ptr<workloads::Workload> model;
  std::unique_ptr<workloads::MarkovSource> source;
  std::unique_ptr<schedulers::NoneScheduler> scheduler;
  std::int64_t next_step = 0;

  /// Starts from preset `name`; adjust the public configs, then call build().
  explicit NoneRun(const char* preset) {
    const auto& p = workloads::model_preset(preset);
    model_config = p.model;
    train = p.train;
    chain = p.chain;
  }
  void build() {
    alloc = std::make_unique<CachingAllocator>(backing);
    model = workloads::make_llama(model_config, train.precision);
    workloads::MarkovChainParams c = chain;
    if (c.vocab == 0) c.vocab = model_config.vocab;
    source = std::make_unique<workloads::MarkovSource>(c, model_config.seq_len);
    scheduler = std::make_unique<schedulers::NoneScheduler>(args());
  }
  /// Scheduler arguments over the built model, training config and allocator.
  schedulers::SchedulerArgs args() const { return scheduler_args(*this); }
  schedulers::StepStats step() { return scheduler->step({next_step++, source.get()}); }
  std::vector<schedulers::StepStats> steps(std::int64_t n) {
    std::vector<schedulers::StepStats> out;
    for (std::int64_t i = 0; i < n; ++i) out.push_back(step());
    return out;
  }
};

}  // namespace hzp::test
