// Document packing in the Llama model (data.packing = documents): a micro-batch of packed sequences, given each
// token's document start, computes exactly its documents run as separate sequences with the same parameters (the
// independent reference: no mask at all, each document its own context of its own length). Every token's logits,
// the loss sum and every parameter gradient (the sum over documents) agree at fp64, with and without recompute,
// over documents shorter than an attention tile, boundaries on the tile edge and a sequence longer than a tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/workloads/data/document_packing.hpp"
#include "hzp/workloads/llama.hpp"
#include "model_test_util.hpp"

namespace hzp::test {
namespace {

constexpr std::int64_t kSeq = 80;  // more than one 64-row attention tile
// Two sequences: short documents (1 and 2 tokens), a boundary on the tile edge (64), one crossing it.
const std::vector<std::vector<std::int32_t>> kStarts = {{0, 7, 8, 10, 64, 70}, {0, 33}};

workloads::LlamaConfig config(std::int64_t seq_len) {
  workloads::LlamaConfig c = shrunk_llama(/*tied=*/false);
  c.seq_len = seq_len;
  return c;
}

struct Run {
  double loss_sum = 0;
  std::vector<double> logits;  // [tokens, V], the packed micro-batch's token order
  std::vector<double> grads;
};

Run run_packed(const TokenBatch& tokens, const std::vector<std::int32_t>& first, const std::vector<double>& params,
               bool recompute, CachingAllocator& alloc) {
  const auto model = workloads::make_llama(config(kSeq), workloads::Precision::fp64);
  const auto& layout = model->layout();
  auto ctx = model->make_context(alloc, {.micro_batch_size = 2, .recompute = recompute});
  Run r;
  r.grads.assign(params.size(), 0.0);
  auto p = params;
  ctx->begin(tokens.inputs, tokens.targets, 1.0, first);
  for (int u = 0; u < layout.num_units(); ++u) model->forward(u, workloads::unit_params_from_flat(layout, u, flat_view(p)), *ctx);
  r.loss_sum = ctx->loss_sum();
  if (!recompute) {
    const ConstTensorView l = ctx->logits();
    r.logits.assign(l.as<double>(), l.as<double>() + l.numel());
  }
  for (int u = layout.num_units() - 1; u >= 0; --u)
    model->backward(u, workloads::unit_params_from_flat(layout, u, flat_view(p)), *ctx,
                    workloads::unit_grads_from_flat(layout, u, flat_view(r.grads), true));
  return r;
}

/// Every document of every sequence as a sequence of its own (a model of the document's length, no mask), the
/// gradients summed over documents, the logits put back at the packed positions.
Run run_apart(const TokenBatch& tokens, const std::vector<double>& params, bool recompute, CachingAllocator& alloc) {
  Run r;
  r.grads.assign(params.size(), 0.0);
  auto p = params;
  bool fresh = true;
  const std::int64_t V = config(kSeq).vocab;
  if (!recompute) r.logits.assign(static_cast<std::size_t>(2 * kSeq * V), 0.0);
  for (std::size_t b = 0; b < kStarts.size(); ++b)
    for (std::size_t d = 0; d < kStarts[b].size(); ++d) {
      const std::int64_t begin = kStarts[b][d], end = d + 1 < kStarts[b].size() ? kStarts[b][d + 1] : kSeq;
      const auto at = static_cast<std::ptrdiff_t>(static_cast<std::int64_t>(b) * kSeq + begin);
      const std::vector<std::int32_t> in(tokens.inputs.begin() + at, tokens.inputs.begin() + at + (end - begin));
      const std::vector<std::int32_t> tg(tokens.targets.begin() + at, tokens.targets.begin() + at + (end - begin));
      const auto model = workloads::make_llama(config(end - begin), workloads::Precision::fp64);
      const auto& layout = model->layout();
      auto ctx = model->make_context(alloc, {.micro_batch_size = 1, .recompute = recompute});
      ctx->begin(in, tg, 1.0);
      for (int u = 0; u < layout.num_units(); ++u)
        model->forward(u, workloads::unit_params_from_flat(layout, u, flat_view(p)), *ctx);
      r.loss_sum += ctx->loss_sum();
      if (!recompute) {
        const ConstTensorView l = ctx->logits();
        std::copy(l.as<double>(), l.as<double>() + l.numel(), r.logits.begin() + at * V);
      }
      for (int u = layout.num_units() - 1; u >= 0; --u)
        model->backward(u, workloads::unit_params_from_flat(layout, u, flat_view(p)), *ctx,
                        workloads::unit_grads_from_flat(layout, u, flat_view(r.grads), fresh));
      fresh = false;
    }
  return r;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, double* scale) {
  double d = 0, s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    s = std::max(s, std::abs(b[i]));
  }
  *scale = s;
  return d;
}

void expect_packed_equals_apart(bool recompute) {
  SCOPED_TRACE(recompute ? "recompute" : "no recompute");
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto model = workloads::make_llama(config(kSeq), workloads::Precision::fp64);
  const std::vector<double> params = initial_params<double>(*model, 9);
  const TokenBatch tokens = random_sequences(2, kSeq, config(kSeq).vocab, 31);
  std::vector<std::int32_t> first(static_cast<std::size_t>(2 * kSeq));
  for (std::size_t b = 0; b < kStarts.size(); ++b)
    workloads::document_first_positions(kStarts[b], kSeq, std::span(first).subspan(b * kSeq, kSeq));

  const Run packed = run_packed(tokens, first, params, recompute, alloc);
  const Run apart = run_apart(tokens, params, recompute, alloc);
  EXPECT_NEAR(packed.loss_sum, apart.loss_sum, 1e-11 * std::abs(apart.loss_sum));
  double scale = 0;
  if (!recompute) {
    const double d = max_abs_diff(packed.logits, apart.logits, &scale);
    EXPECT_LE(d, 1e-12 * scale) << "logits";
  }
  const double d = max_abs_diff(packed.grads, apart.grads, &scale);
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(d, 1e-11 * scale) << "gradients: max |difference| " << d << " of max |gradient| " << scale;

  // The boundaries matter: the same tokens as whole sequences give another loss.
  const Run whole = run_packed(tokens, std::vector<std::int32_t>(first.size(), 0), params, recompute, alloc);
  EXPECT_GT(std::abs(whole.loss_sum - apart.loss_sum), 1e-6);
}

TEST(LlamaPacking, PackedSequencesEqualTheirDocumentsRunApart) { expect_packed_equals_apart(false); }
TEST(LlamaPacking, PackedSequencesEqualTheirDocumentsRunApartUnderRecompute) { expect_packed_equals_apart(true); }

TEST(LlamaPacking, AllZeroFirstIsBitwiseNoPacking) {
  // first all zero still takes RoPE's explicit-position path: positions t mod T give rope_fwd's bits, and the
  // attention kernels promise the unmasked bits, so the whole model agrees bitwise.
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto model = workloads::make_llama(config(kSeq), workloads::Precision::fp32);
  auto params = initial_params<float>(*model, 9);
  const TokenBatch tokens = random_sequences(2, kSeq, config(kSeq).vocab, 32);
  const std::vector<std::int32_t> zeros(static_cast<std::size_t>(2 * kSeq), 0);
  const auto& layout = model->layout();
  std::vector<float> g1(params.size()), g2(params.size());
  double loss[2];
  for (int pass = 0; pass < 2; ++pass) {
    auto ctx = model->make_context(alloc, {.micro_batch_size = 2});
    if (pass == 0) ctx->begin(tokens.inputs, tokens.targets, 1.0);
    else ctx->begin(tokens.inputs, tokens.targets, 1.0, zeros);
    for (int u = 0; u < layout.num_units(); ++u)
      model->forward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx);
    loss[pass] = ctx->loss_sum();
    for (int u = layout.num_units() - 1; u >= 0; --u)
      model->backward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx,
                      workloads::unit_grads_from_flat(layout, u, flat_view(pass == 0 ? g1 : g2), true));
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(g1, g2);
}

TEST(LlamaPacking, DocumentFirstOfTheWrongSizeIsRefused) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto model = workloads::make_llama(config(kSeq), workloads::Precision::fp64);
  auto ctx = model->make_context(alloc, {.micro_batch_size = 2});
  const TokenBatch tokens = random_sequences(2, kSeq, config(kSeq).vocab, 33);
  const std::vector<std::int32_t> short_first(10, 0);
  try {
    ctx->begin(tokens.inputs, tokens.targets, 1.0, short_first);
    FAIL() << "a document_first of 10 positions for 160 tokens was accepted";
  } catch (const PreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("document_first holds 10"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hzp::test
