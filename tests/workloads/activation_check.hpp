// A check shared by the Llama tests: a model spec's activation bytes (ModelSpec::activation_bytes) against what
// the built model's passes allocate under the allocator's `activation` tag, unit by unit, for one micro-batch:
// what each forward leaves held, the highest level each forward and backward reaches above the level before
// it, and that each backward returns what its forward kept.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "model_test_util.hpp"

namespace hzp::test {

inline void expect_activation_bytes_match(const workloads::ModelSpec& spec, const workloads::Workload& model,
                                          const workloads::TensorParallelRun& run, ConstTensorView params,
                                          TensorView grads, const TokenBatch& batch, const std::string& label) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const workloads::ParamLayout& layout = model.layout();
  auto ctx = model.make_context(alloc, {.micro_batch_size = run.micro_batch_size, .recompute = run.recompute});
  auto level = [&] { return alloc.stats().tag(AllocationTag::activation).requested_bytes; };
  auto peak = [&] { return alloc.stats().tag(AllocationTag::activation).peak_requested_bytes; };
  ctx->begin(batch.inputs, batch.targets, static_cast<double>(batch.inputs.size()));
  const std::size_t start = level();
  for (int u = 0; u < layout.num_units(); ++u) {
    const workloads::UnitActivationBytes e = spec.activation_bytes(u, run);
    const std::size_t before = level();
    alloc.reset_peaks();
    model.forward(u, workloads::unit_params_from_flat(layout, u, params), *ctx);
    EXPECT_EQ(level() - before, e.kept) << label << ": unit " << u << " forward keeps";
    EXPECT_EQ(peak() - before, e.forward_peak) << label << ": unit " << u << " forward's peak";
  }
  for (int u = layout.num_units() - 1; u >= 0; --u) {
    const workloads::UnitActivationBytes e = spec.activation_bytes(u, run);
    const std::size_t before = level();
    alloc.reset_peaks();
    model.backward(u, workloads::unit_params_from_flat(layout, u, params), *ctx,
                   workloads::unit_grads_from_flat(layout, u, grads, true));
    EXPECT_EQ(before - level(), e.kept) << label << ": unit " << u << " backward returns";
    EXPECT_EQ(peak() - before, e.backward_peak) << label << ": unit " << u << " backward's peak";
  }
  EXPECT_EQ(level(), start) << label;
}

}  // namespace hzp::test
