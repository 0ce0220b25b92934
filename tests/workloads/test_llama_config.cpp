// Llama configuration and presets: refusals that name the values, parameter and FLOP counts recomputed
// here from the shapes (never by calling the code's own formula twice), the published Seed-OSS-36B size,
// and presets that build and count without allocating parameters; TrainConfig refusals too.
#include <gtest/gtest.h>

#include <cmath>

#include "data_test_util.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/presets.hpp"
#include "hzp/workloads/train_config.hpp"

namespace hzp::test {
namespace {

using workloads::LlamaConfig;

TEST(LlamaConfig, RefusesHeadsNotDivisibleByKvHeads) {
  LlamaConfig c;
  c.heads = 6;
  c.kv_heads = 4;
  c.head_dim = 16;
  EXPECT_TRUE(throws_with<ConfigError>([&] { c.validate(); }, {"model.heads = 6", "model.kv_heads = 4"}));
}

TEST(LlamaConfig, RefusesZeroSizesListingEveryProblem) {
  LlamaConfig c;
  c.layers = 0;
  c.ffn_hidden = 0;
  c.vocab = 1;
  EXPECT_TRUE(throws_with<ConfigError>([&] { c.validate(); },
                                       {"model.layers = 0", "model.ffn_hidden = 0", "model.vocab = 1"}));
}

TEST(LlamaConfig, RefusesSeqLenAboveThePresetLimit) {
  LlamaConfig c = workloads::model_preset("tiny").model;
  c.seq_len = 4096;
  EXPECT_TRUE(throws_with<ConfigError>([&] { c.validate(); },
                                       {"model.seq_len = 4096", "tiny", "model.max_seq_len = 1024"}));
}

TEST(LlamaConfig, HeadDimDefaultsToHiddenOverHeadsAndMustBeEven) {
  LlamaConfig c;
  c.head_dim = 0;
  EXPECT_EQ(c.resolved_head_dim(), 16);
  c.validate();
  c.hidden = 66;
  EXPECT_TRUE(throws_with<ConfigError>([&] { c.validate(); }, {"model.hidden = 66", "model.heads = 4", "model.head_dim"}));
  c.hidden = 64;
  c.head_dim = 15;
  EXPECT_TRUE(throws_with<ConfigError>([&] { c.validate(); }, {"head_dim = 15", "even"}));
}

// Counts recomputed from the shape, tensor by tensor.
std::int64_t count_by_hand(std::int64_t L, std::int64_t d, std::int64_t h, std::int64_t kv, std::int64_t hd,
                           std::int64_t f, std::int64_t V, bool tied) {
  const std::int64_t per_layer = d + d * h * hd + 2 * d * kv * hd + h * hd * d + d + 2 * f * d + d * f;
  return V * d + L * per_layer + d + (tied ? 0 : V * d);
}

TEST(Presets, ShapesAndCountsAsIssueFiveLists) {
  const auto& tiny = workloads::model_preset("tiny");
  EXPECT_EQ(tiny.model.num_params(), count_by_hand(4, 64, 4, 2, 16, 192, 64, tiny.model.tied_embeddings));
  EXPECT_EQ(tiny.train.global_batch, 16);
  EXPECT_EQ(tiny.train.micro_batch_size, 2);
  EXPECT_DOUBLE_EQ(tiny.train.lr, 3e-3);
  EXPECT_DOUBLE_EQ(tiny.train.lr_min, 0.1 * tiny.train.lr);
  EXPECT_EQ(tiny.train.warmup_steps, 30);
  EXPECT_DOUBLE_EQ(tiny.train.clip, 1.0);
  EXPECT_DOUBLE_EQ(tiny.train.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(tiny.train.beta1, 0.9);
  EXPECT_DOUBLE_EQ(tiny.train.beta2, 0.95);
  EXPECT_EQ(tiny.chain.order, 1);
  EXPECT_EQ(tiny.chain.successors, 4);
  EXPECT_EQ(tiny.chain.concentration, 0.0) << "equal successor probabilities: floor = ln 4";
  EXPECT_EQ(tiny.chain.vocab, 0) << "the chain's vocabulary follows model.vocab";

  const auto& small = workloads::model_preset("small").model;
  EXPECT_GE(small.num_params(), 20'000'000);
  EXPECT_LE(small.num_params(), 30'000'000);

  const auto& b1 = workloads::model_preset("1b").model;
  EXPECT_EQ(b1.num_params(), count_by_hand(16, 2048, 32, 8, 64, 8192, 128256, b1.tied_embeddings));
  EXPECT_EQ(b1.seq_len, 4096);

  const auto& b9 = workloads::model_preset("9b");
  EXPECT_EQ(b9.model.num_params(), count_by_hand(40, 4096, 32, 8, 128, 14336, 155136, b9.model.tied_embeddings));
  EXPECT_NE(b9.source.find("assumed"), std::string::npos);
  EXPECT_NEAR(static_cast<double>(b9.model.num_params()), 9e9, 0.5e9);
}

TEST(Presets, SeedOss36bMatchesThePublishedSize) {
  const auto& p = workloads::model_preset("seed-oss-36b").model;
  EXPECT_EQ(p.layers, 64);
  EXPECT_EQ(p.hidden, 5120);
  EXPECT_EQ(p.heads, 80);
  EXPECT_EQ(p.kv_heads, 8);
  EXPECT_EQ(p.resolved_head_dim(), 128);
  EXPECT_EQ(p.ffn_hidden, 27648);
  EXPECT_EQ(p.vocab, 155136);
  EXPECT_DOUBLE_EQ(p.rope_base, 1e7);
  const std::int64_t n = p.num_params();
  EXPECT_EQ(n, count_by_hand(64, 5120, 80, 8, 128, 27648, 155136, p.tied_embeddings));
  // Published: "36B" (the model card); untied embeddings give 36.15B, within 1%.
  EXPECT_NEAR(static_cast<double>(n) / 36e9, 1.0, 0.01) << n;
  std::printf("[presets] seed-oss-36b N = %lld\n", static_cast<long long>(n));
}

TEST(Presets, EveryPresetBuildsAndCountsWithoutParameters) {
  for (const auto& p : workloads::model_presets()) {
    p.model.validate();
    p.train.validate();
    // Building the workload lays out units only; no parameter memory exists anywhere.
    const auto w = workloads::make_llama(p.model, workloads::Precision::bf16_mixed);
    EXPECT_EQ(w->layout().total_numel(), p.model.num_params()) << p.name;
    EXPECT_EQ(w->layout().num_units(), p.model.layers + 2) << p.name;
    EXPECT_GT(w->flops_per_token().full_attention, 0) << p.name;
  }
  EXPECT_TRUE(throws_with<ConfigError>([] { workloads::model_preset("huge"); }, {"\"huge\"", "tiny", "seed-oss-36b"}));
}

TEST(Flops, TwoConventionsFromTheShape) {
  const LlamaConfig c = workloads::model_preset("tiny").model;
  // N_matmul: q, k, v, o, gate, up, down per block, plus the LM head (tied or not); no norms, no lookup.
  const double per_block = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64 + 3 * 64.0 * 192;
  const double n_matmul = 4 * per_block + 64.0 * 64;
  EXPECT_EQ(c.num_matmul_params(), static_cast<std::int64_t>(n_matmul));
  const double attn = 12.0 * 4 * 4 * 16 * 64;
  const auto f = c.flops_per_token();
  EXPECT_DOUBLE_EQ(f.full_attention, 6 * n_matmul + attn);
  EXPECT_DOUBLE_EQ(f.causal_attention, 6 * n_matmul + attn / 2);
}

TEST(TrainConfig, RefusesBadValuesNamingThem) {
  workloads::TrainConfig t;
  t.global_batch = 10;
  t.micro_batch_size = 4;
  t.warmup_steps = 500;
  t.lr_min = 1.0;
  t.beta2 = 1.0;
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { t.validate(); }, {"train.global_batch = 10", "train.micro_batch_size = 4", "train.warmup_steps = 500",
                              "train.steps = 300", "train.lr_min = 1", "train.beta2 = 1"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { workloads::parse_precision("fp16"); }, {"fp16", "bf16-mixed"}));
}

}  // namespace
}  // namespace hzp::test
