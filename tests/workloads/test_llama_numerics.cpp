// Numerical contracts of the Llama workload through the unit interface: micro-batch accumulation with
// the global normaliser equals one larger micro-batch; causality holds bitwise for the whole model;
// recompute on/off gives bitwise-identical gradients; bf16-mixed gradients track fp32; activations are
// all returned after backward; calls out of order or without their blocks are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "data_test_util.hpp"
#include "hzp/core/memory_backing.hpp"
#include "model_test_util.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

workloads::LlamaConfig tiny() { return workloads::LlamaConfig{}; }  // the defaults are tiny's shape

// Per tensor: max |a - b| / max |a| (0 when both are 0).
template <typename T>
double worst_tensor_error(const workloads::ParamLayout& layout, const std::vector<T>& a, const std::vector<T>& b,
                          std::string* where = nullptr) {
  double worst = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& t : layout.unit(u).tensors) {
      const std::int64_t base = layout.unit_offset(u) + t.offset;
      double diff = 0, scale = 0;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        const auto k = static_cast<std::size_t>(base + i);
        diff = std::max(diff, std::abs(static_cast<double>(a[k]) - static_cast<double>(b[k])));
        scale = std::max(scale, std::abs(static_cast<double>(a[k])));
      }
      const double e = scale > 0 ? diff / scale : diff;
      if (e > worst) {
        worst = e;
        if (where) *where = t.name;
      }
    }
  return worst;
}

TEST(LlamaNumerics, MicroBatchAccumulationEqualsOneMicroBatch) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto cfg = tiny();
  const auto model = workloads::make_llama(cfg, Precision::fp32);
  auto params = initial_params<float>(*model, 5);
  const TokenBatch all = random_sequences(4, cfg.seq_len, cfg.vocab, 21);
  const double norm = static_cast<double>(all.targets.size());
  std::vector<float> g_one(params.size()), g_two(params.size());
  const double l_one = run_micro_batches(*model, flat_view(params), flat_view(g_one), split(all, 4, cfg.seq_len), norm, false, alloc);
  const double l_two = run_micro_batches(*model, flat_view(params), flat_view(g_two), split(all, 2, cfg.seq_len), norm, false, alloc);
  std::string where;
  const double err = worst_tensor_error(model->layout(), g_one, g_two, &where);
  std::printf("[accumulation] loss %.9f vs %.9f; worst per-tensor gradient error %.3g (%s)\n", l_one, l_two, err,
              where.c_str());
  EXPECT_NEAR(l_one, l_two, 1e-6 * l_one);
  // Only the summation order differs (GEMM blocking over 4 vs 2+2 sequences): fp32 rounding, ~1e-7.
  EXPECT_LT(err, 1e-5) << where;
}

// Whole model: logits at positions <= t of every sequence are bitwise unchanged by any change to the
// tokens after t.
void check_causality(Precision precision) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto cfg = tiny();
  const auto model = workloads::make_llama(cfg, precision);
  const auto& layout = model->layout();
  const std::int64_t mbs = 2, T = cfg.seq_len, V = cfg.vocab;
  auto run_logits = [&](auto& params, const TokenBatch& b) {
    auto ctx = model->make_context(alloc, {.micro_batch_size = mbs, .recompute = false});
    ctx->begin(b.inputs, b.targets, static_cast<double>(b.targets.size()));
    for (int u = 0; u < layout.num_units(); ++u)
      model->forward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx);
    const ConstTensorView l = ctx->logits();
    std::vector<std::byte> bytes(l.bytes());
    std::memcpy(bytes.data(), l.data(), l.bytes());
    return bytes;
  };
  auto check = [&](auto params) {
    const TokenBatch base = random_sequences(mbs, T, V, 31);
    const auto ref = run_logits(params, base);
    const std::size_t row = ref.size() / static_cast<std::size_t>(mbs * T);
    for (std::int64_t t : {0L, 1L, 17L, T - 2}) {
      TokenBatch pert = base;
      for (std::int64_t b = 0; b < mbs; ++b)
        for (std::int64_t s = t + 1; s < T; ++s) {
          auto& tok = pert.inputs[static_cast<std::size_t>(b * T + s)];
          tok = static_cast<std::int32_t>((tok + 1 + s % (V - 1)) % V);  // never the same token
        }
      const auto out = run_logits(params, pert);
      for (std::int64_t b = 0; b < mbs; ++b) {
        const std::size_t first = static_cast<std::size_t>(b * T) * row;
        EXPECT_EQ(0, std::memcmp(ref.data() + first, out.data() + first, static_cast<std::size_t>(t + 1) * row))
            << "sequence " << b << ": logits up to position " << t << " changed";
        const std::size_t next = first + static_cast<std::size_t>(t + 1) * row;
        EXPECT_NE(0, std::memcmp(ref.data() + next, out.data() + next, row))
            << "sequence " << b << ": position " << t + 1 << " did not see its own perturbed token";
      }
    }
  };
  if (precision == Precision::bf16_mixed)
    check(initial_params<bf16>(*model, 3));
  else
    check(initial_params<float>(*model, 3));
}

TEST(LlamaNumerics, CausalityBitwiseFp32) { check_causality(Precision::fp32); }
TEST(LlamaNumerics, CausalityBitwiseBf16) { check_causality(Precision::bf16_mixed); }

template <typename P>
void check_recompute_bitwise(Precision precision) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto cfg = tiny();
  const auto model = workloads::make_llama(cfg, precision);
  auto params = initial_params<P>(*model, 9);
  const TokenBatch all = random_sequences(4, cfg.seq_len, cfg.vocab, 41);
  const auto mbs = split(all, 2, cfg.seq_len);
  const double norm = static_cast<double>(all.targets.size());
  using G = std::conditional_t<std::is_same_v<P, double>, double, float>;
  std::vector<G> g_keep(params.size()), g_re(params.size());
  const double l_keep = run_micro_batches(*model, flat_view(params), flat_view(g_keep), mbs, norm, false, alloc);
  alloc.reset_peaks();
  const double l_re = run_micro_batches(*model, flat_view(params), flat_view(g_re), mbs, norm, true, alloc);
  EXPECT_EQ(l_keep, l_re);
  EXPECT_EQ(0, std::memcmp(g_keep.data(), g_re.data(), g_keep.size() * sizeof(G)));
}

TEST(LlamaNumerics, RecomputeGivesBitwiseIdenticalGradientsFp32) { check_recompute_bitwise<float>(Precision::fp32); }
TEST(LlamaNumerics, RecomputeGivesBitwiseIdenticalGradientsBf16) { check_recompute_bitwise<bf16>(Precision::bf16_mixed); }

TEST(LlamaNumerics, ActivationsReturnedAfterBackwardAndRecomputeHoldsLess) {
  const auto cfg = tiny();
  const auto model = workloads::make_llama(cfg, Precision::fp32);
  const auto& layout = model->layout();
  auto params = initial_params<float>(*model, 1);
  std::vector<float> grads(params.size());
  const TokenBatch b = random_sequences(2, cfg.seq_len, cfg.vocab, 2);
  std::size_t peak[2] = {0, 0};
  for (bool recompute : {false, true}) {
    HostBacking backing;
    CachingAllocator alloc(backing);
    auto ctx = model->make_context(alloc, {.micro_batch_size = 2, .recompute = recompute});
    ctx->begin(b.inputs, b.targets, 128.0);
    for (int u = 0; u < layout.num_units(); ++u)
      model->forward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx);
    for (int u = layout.num_units() - 1; u >= 0; --u)
      model->backward(u, workloads::unit_params_from_flat(layout, u, flat_view(params)), *ctx,
                      workloads::unit_grads_from_flat(layout, u, flat_view(grads), true));
    const auto st = alloc.stats();
    EXPECT_EQ(st.tag(AllocationTag::activation).allocated_bytes, 0u) << "recompute=" << recompute;
    EXPECT_EQ(st.tag(AllocationTag::workspace).allocated_bytes, 0u) << "recompute=" << recompute;
    peak[recompute] = st.tag(AllocationTag::activation).peak_requested_bytes;
  }
  std::printf("[memory] tiny, 2 x 64 tokens: peak activations %zu B without recompute, %zu B with\n", peak[0], peak[1]);
  EXPECT_LT(peak[1], peak[0] / 2);
}

TEST(LlamaNumerics, Bf16GradientsTrackFp32) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto cfg = tiny();
  const auto m32 = workloads::make_llama(cfg, Precision::fp32);
  const auto m16 = workloads::make_llama(cfg, Precision::bf16_mixed);
  // The same bf16-representable parameters in both, so only activation rounding differs.
  auto p16 = initial_params<bf16>(*m16, 4);
  std::vector<float> p32(p16.size());
  float_from_bf16(p32.data(), p16.data(), p16.size());
  const TokenBatch all = random_sequences(4, cfg.seq_len, cfg.vocab, 5);
  const auto mbs = split(all, 2, cfg.seq_len);
  const double norm = static_cast<double>(all.targets.size());
  std::vector<float> g32(p32.size()), g16(p32.size());
  const double l32 = run_micro_batches(*m32, flat_view(p32), flat_view(g32), mbs, norm, false, alloc);
  const double l16 = run_micro_batches(*m16, flat_view(p16), flat_view(g16), mbs, norm, false, alloc);
  double dot = 0, n32 = 0, n16 = 0;
  for (std::size_t i = 0; i < g32.size(); ++i) {
    dot += static_cast<double>(g32[i]) * g16[i];
    n32 += static_cast<double>(g32[i]) * g32[i];
    n16 += static_cast<double>(g16[i]) * g16[i];
  }
  const double cosine = dot / std::sqrt(n32 * n16);
  std::printf("[bf16] loss fp32 %.6f bf16 %.6f; gradient cosine %.6f, norm ratio %.4f\n", l32, l16, cosine,
              std::sqrt(n16 / n32));
  // bf16 keeps 8 significant bits: per-activation relative rounding ~2^-9, compounded over ~30 kernels.
  EXPECT_NEAR(l16, l32, 0.01 * l32);
  EXPECT_GT(cosine, 0.99);
}

// A context's stream and its allocator must be on one device: host activations with a CUDA stream (or
// the reverse) would hand kernels memory they cannot touch.
TEST(LlamaNumerics, ContextRefusesAStreamOnAnotherDeviceThanItsAllocator) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto model = workloads::make_llama(tiny(), Precision::fp32);
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        (void)model->make_context(alloc, {.micro_batch_size = 1, .recompute = false,
                                          .stream = StreamRef::wrap(Device::cuda(0), nullptr)});
      },
      {"a context on cuda:0 needs an allocator of that device, got one of cpu"}));
}

TEST(LlamaNumerics, RefusesCallsOutOfOrderOrWithoutTheirBlocks) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto cfg = tiny();
  const auto model = workloads::make_llama(cfg, Precision::fp32);
  const auto& layout = model->layout();
  auto params = initial_params<float>(*model, 1);
  std::vector<float> grads(params.size());
  const TokenBatch b = random_sequences(1, cfg.seq_len, cfg.vocab, 2);
  auto ctx = model->make_context(alloc, {.micro_batch_size = 1, .recompute = false});
  auto P = [&](int u) { return workloads::unit_params_from_flat(layout, u, flat_view(params)); };
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->forward(0, P(0), *ctx); }, {"before begin()"}));
  ctx->begin(b.inputs, b.targets, 64.0);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->forward(1, P(1), *ctx); }, {"forward(1) out of order", "forward(0)"}));
  for (int u = 0; u < 3; ++u) model->forward(u, P(u), *ctx);
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] { model->backward(2, P(2), *ctx, workloads::unit_grads_from_flat(layout, 2, flat_view(grads), true)); },
      {"before the forward pass finished"}));
  for (int u = 3; u < layout.num_units() - 1; ++u) model->forward(u, P(u), *ctx);
  const int head = layout.num_units() - 1;
  workloads::UnitParams only_head;
  only_head.set(head, workloads::unit_block(layout, head, ConstTensorView(flat_view(params))));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->forward(head, only_head, *ctx); }, {"unit 0", "not provided"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { ctx->loss_sum(); }, {"after the last unit's forward"}));
}

}  // namespace
}  // namespace hzp::test
