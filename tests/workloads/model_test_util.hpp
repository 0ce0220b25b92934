// Helpers for the model tests: shrunk Llama shapes, deterministic token batches, and a minimal loop
// that runs forward and backward of every unit over flat parameter and gradient buffers (what a
// scheduler does, without any optimizer), so tests can compare losses and gradients directly.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::test {

/// A Llama small enough for finite differences in double: 2 blocks, d=16, 4/2 heads of 4, ffn 24,
/// V=11, T=8.
inline workloads::LlamaConfig shrunk_llama(bool tied) {
  workloads::LlamaConfig c;
  c.layers = 2;
  c.hidden = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 4;
  c.ffn_hidden = 24;
  c.vocab = 11;
  c.seq_len = 8;
  c.tied_embeddings = tied;
  return c;
}

/// shrunk_llama with its second block an MoE block: 4 routed experts of width 6 (top-2) and 1 shared.
inline workloads::LlamaConfig shrunk_moe() {
  workloads::LlamaConfig c = shrunk_llama(true);
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_experts = 1;
  c.moe.expert_ffn = 6;
  c.moe.dense_layers = 1;
  return c;
}

/// One micro-batch of tokens: [mbs, T] inputs and targets, row-major.
struct TokenBatch {
  std::vector<std::int32_t> inputs, targets;
};

/// `count` sequences of T random tokens in [0, V) (inputs) and their targets, seeded.
inline TokenBatch random_sequences(std::int64_t count, std::int64_t seq_len, std::int64_t vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(vocab - 1));
  TokenBatch b;
  for (std::int64_t i = 0; i < count * seq_len; ++i) {
    b.inputs.push_back(d(gen));
    b.targets.push_back(d(gen));
  }
  return b;
}

/// Splits a batch of sequences into micro-batches of `mbs` sequences (in order).
inline std::vector<TokenBatch> split(const TokenBatch& all, std::int64_t mbs, std::int64_t seq_len) {
  std::vector<TokenBatch> out;
  const std::size_t per = static_cast<std::size_t>(mbs * seq_len);
  for (std::size_t i = 0; i < all.inputs.size(); i += per) {
    TokenBatch b;
    b.inputs.assign(all.inputs.begin() + i, all.inputs.begin() + i + per);
    b.targets.assign(all.targets.begin() + i, all.targets.begin() + i + per);
    out.push_back(std::move(b));
  }
  return out;
}

/// Runs every micro-batch through forward (and backward when `grads` has data), the way the `none`
/// scheduler does, and returns Σ_j loss_sum_j / normaliser (the global mean loss).
inline double run_micro_batches(const workloads::Workload& w, ConstTensorView params, TensorView grads,
                                const std::vector<TokenBatch>& mbs, double normaliser, bool recompute,
                                CachingAllocator& alloc) {
  const auto& layout = w.layout();
  const std::int64_t mbs_size = static_cast<std::int64_t>(mbs.front().inputs.size()) / w.local_seq_len();
  auto ctx = w.make_context(alloc, {.micro_batch_size = mbs_size, .recompute = recompute});
  double loss = 0;
  for (std::size_t j = 0; j < mbs.size(); ++j) {
    ctx->begin(mbs[j].inputs, mbs[j].targets, normaliser);
    for (int u = 0; u < layout.num_units(); ++u) w.forward(u, workloads::unit_params_from_flat(layout, u, params), *ctx);
    loss += ctx->loss();
    if (grads.data() == nullptr) continue;
    for (int u = layout.num_units() - 1; u >= 0; --u)
      w.backward(u, workloads::unit_params_from_flat(layout, u, params), *ctx,
                 workloads::unit_grads_from_flat(layout, u, grads, j == 0));
  }
  return loss;
}

/// A flat buffer of n elements of T as a 1-D view.
template <typename T>
TensorView flat_view(std::vector<T>& v) {
  return TensorView(v.data(), Shape{static_cast<std::int64_t>(v.size())}, dtype_of_v<T>);
}

/// Initial parameters in the workload's param dtype (bf16 = the fp32 values rounded once).
template <typename T>
std::vector<T> initial_params(const workloads::Workload& w, std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(w.layout().total_numel());
  if constexpr (std::is_same_v<T, double>) {
    std::vector<double> p(n);
    w.init_params(0, std::span<double>(p), seed);
    return p;
  } else {
    std::vector<float> f(n);
    w.init_params(0, std::span<float>(f), seed);
    if constexpr (std::is_same_v<T, float>) {
      return f;
    } else {
      std::vector<bf16> b(n);
      bf16_from_float(b.data(), f.data(), n);
      return b;
    }
  }
}

/// The whole model's loss and flat gradient over `mbs` in fp64, parameters from seed 9: the reference a split model
/// (tensor- or context-parallel) is compared with.
struct WholeModelReference {
  double loss = 0;
  std::vector<double> grads;
};
inline WholeModelReference whole_model_reference(const workloads::LlamaConfig& cfg, const std::vector<TokenBatch>& mbs,
                                                 double norm, bool recompute, CachingAllocator& alloc) {
  const auto model = workloads::make_llama(cfg, workloads::Precision::fp64);
  auto params = initial_params<double>(*model, 9);
  WholeModelReference r;
  r.grads.assign(params.size(), 0.0);
  r.loss = run_micro_batches(*model, flat_view(params), flat_view(r.grads), mbs, norm, recompute, alloc);
  return r;
}

/// The largest |difference| between a split model's gradient (`grads`, flat in its own `layout`: whole tensors or
/// pieces of tensors) and the whole model's at the same elements, and the largest |gradient| of the whole model.
struct GradientDifference {
  double worst = 0, scale = 0;
};
inline GradientDifference piece_gradient_difference(const workloads::LlamaConfig& cfg, const workloads::ParamLayout& layout,
                                                    const std::vector<double>& grads, const WholeModelReference& ref) {
  const workloads::ParamLayout whole = workloads::llama_layout(cfg);
  GradientDifference d;
  for (double g : ref.grads) d.scale = std::max(d.scale, std::abs(g));
  for (int u = 0; u < layout.num_units(); ++u)
    for (std::size_t t = 0; t < layout.unit(u).tensors.size(); ++t) {
      const workloads::ParamTensor& p = layout.unit(u).tensors[t];
      const std::int64_t base = p.shard.sharded() ? p.global_offset : whole.tensor_offset(u, static_cast<int>(t));
      for (std::int64_t i = 0; i < p.numel(); ++i) {
        const double got = grads[static_cast<std::size_t>(layout.tensor_offset(u, static_cast<int>(t)) + i)];
        const double want = ref.grads[static_cast<std::size_t>(base + p.index_in_full(i))];
        d.worst = std::max(d.worst, std::abs(got - want));
      }
    }
  return d;
}

}  // namespace hzp::test
