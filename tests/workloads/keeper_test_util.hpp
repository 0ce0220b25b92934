// One micro-batch of a model run with a request keeper (ContextOptions::requests), for the keeper tests of the
// model's own collectives (test_llama_tp_keeper: tensor parallelism's; test_llama_cp_keeper: ring attention's): what
// the keeper held after each unit call, what the group's counters recorded before and after complete(), and the loss
// and gradients to compare bitwise with the blocking form (no keeper).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/memory_backing.hpp"
#include "model_test_util.hpp"

namespace hzp::test {

struct MicroBatchRun {
  double loss = 0;
  std::vector<double> grads;
  /// keeper->kept() after each unit's forward (units in order), then after each unit's backward (last unit first).
  std::vector<std::size_t> kept_after_forward, kept_after_backward;
  std::size_t kept_before_complete = 0;
  std::uint64_t recorded_before_complete = 0, recorded_after_complete = 0;
};

/// One micro-batch forward and backward of `model` (fp64, parameters from seed 9) with `keeper` (nullptr: none),
/// completed at the end; `group` is the communicator whose counters are read.
inline MicroBatchRun run_with_keeper(const workloads::Workload& model, coll::Communicator& group,
                                     coll::StreamOrderedRequests* keeper, const TokenBatch& mb, std::int64_t mbs,
                                     double norm, bool recompute = false) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const workloads::ParamLayout& layout = model.layout();
  auto params = initial_params<double>(model, 9);
  MicroBatchRun r;
  r.grads.assign(params.size(), -3.0);
  auto kept = [&] { return keeper ? keeper->kept() : std::size_t{0}; };
  const coll::CounterSnapshot before = group.counters().snapshot();
  auto ctx = model.make_context(alloc, {.micro_batch_size = mbs, .recompute = recompute, .requests = keeper});
  ctx->begin(mb.inputs, mb.targets, norm);
  for (int u = 0; u < layout.num_units(); ++u) {
    model.forward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx);
    r.kept_after_forward.push_back(kept());
  }
  r.loss = ctx->loss();
  for (int u = layout.num_units() - 1; u >= 0; --u) {
    model.backward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx,
                   workloads::unit_grads_from_flat(layout, u, flat_view(r.grads), true));
    r.kept_after_backward.push_back(kept());
  }
  r.recorded_before_complete = group.counters().delta(before).calls();
  r.kept_before_complete = kept();
  if (keeper) keeper->complete();
  r.recorded_after_complete = group.counters().delta(before).calls();
  return r;
}

inline void expect_bitwise(const MicroBatchRun& a, const MicroBatchRun& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << what << ": loss " << a.loss << " vs " << b.loss;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(double)), 0) << what << ": gradients";
}

}  // namespace hzp::test
