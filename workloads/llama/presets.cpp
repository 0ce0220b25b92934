// The model presets (presets.hpp): shapes with their training and data defaults. Published shapes say
// where they come from; the 9B shape is assumed (the AsyncHZP paper names a Seed-OSS-9B but publishes
// no configuration, and none was released). Parameter counts (LlamaConfig::num_params):
//   tiny ≈ 0.20M, small ≈ 27.8M, 1b ≈ 1.236B, 9b ≈ 9.36B, seed-oss-36b ≈ 36.15B; the MoE presets in
//   docs/workloads.md.
#include "hzp/workloads/presets.hpp"

#include <sstream>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::workloads {
namespace {

LlamaConfig shape(const char* preset, std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                  std::int64_t kv_heads, std::int64_t head_dim, std::int64_t ffn, std::int64_t vocab,
                  std::int64_t seq_len, std::int64_t max_seq_len, double rope_base, double norm_eps, bool tied) {
  LlamaConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn_hidden = ffn;
  c.vocab = vocab;
  c.seq_len = seq_len;
  c.max_seq_len = max_seq_len;
  c.rope_base = rope_base;
  c.norm_eps = norm_eps;
  c.tied_embeddings = tied;
  c.preset = preset;
  return c;
}

TrainConfig train(std::int64_t global_batch, std::int64_t micro_batch_size, std::int64_t steps,
                  std::int64_t warmup, double lr, Precision precision) {
  TrainConfig t;
  t.precision = precision;
  t.global_batch = global_batch;
  t.micro_batch_size = micro_batch_size;
  t.steps = steps;
  t.warmup_steps = warmup;
  t.lr = lr;
  t.lr_min = lr / 10;  // cosine to 10% of the peak (a division prints exactly: 3e-4, not 0.1 * 3e-3)
  t.clip = 1.0;
  t.weight_decay = 0.1;
  t.beta1 = 0.9;
  t.beta2 = 0.95;
  return t;
}

// Synthetic order-1 chain over the model's vocabulary, 4 successors per context with equal probabilities
// (concentration 0): the floor is exactly ln 4 = 1.3863 nats, checkable by hand in any results file,
// learnable by tiny in 300 steps, and cheap to build even at V = 155,136. (With Dirichlet(1) weights
// tiny ends 2.5-3.3% above its floor after 300 steps, depending on the chain's seed; docs/workloads.md.)
// The MoE keys on top of a shape: `experts` routed of width `expert_ffn`, top_k, shared, dense_layers first.
LlamaConfig with_experts(LlamaConfig c, std::int64_t experts, std::int64_t top_k, std::int64_t shared,
                         std::int64_t expert_ffn, std::int64_t dense_layers) {
  c.moe.experts = experts;
  c.moe.top_k = top_k;
  c.moe.shared_experts = shared;
  c.moe.expert_ffn = expert_ffn;
  c.moe.dense_layers = dense_layers;
  return c;  // sigmoid scores, bias balancing at DeepSeek-V3's rate 0.001, dropless: MoeConfig's defaults
}

MarkovChainParams chain() {
  return MarkovChainParams{.order = 1, .vocab = 0, .successors = 4, .concentration = 0.0, .seed = 0};
}

// Precision: tiny and small train in fp32 on the CPU (the exact reference; bf16 on a CPU is stored bf16
// but computed in fp32, so it is slower, not faster); the paper-scale presets default to bf16-mixed, the
// setting whose memory formulas (18 bytes per parameter) their plans are about.
std::vector<ModelPreset> build() {
  std::vector<ModelPreset> p;
  // tiny: shaped for every later layout (layers >= 4, heads and kv_heads even, ffn and seq_len divisible
  // by 4); trains to its floor in seconds on one core. max_seq_len guards the O(T²) attention reference.
  p.push_back({"tiny", "4 layers, d=64, ~0.2M parameters: trains in seconds on one core",
               "hzpbench (issue 5)",
               shape("tiny", 4, 64, 4, 2, 16, 192, 64, 64, 1024, 1e4, 1e-5, true), train(16, 2, 300, 30, 3e-3, Precision::fp32),
               chain()});
  // small: 20-30M parameters and one step in a few seconds on one core (docs/workloads.md has the
  // measurement); 8 micro-batches of 1 sequence, so 1, 2, 4 and 8 data-parallel ranks all divide them.
  p.push_back({"small", "8 layers, d=512, ~27.8M parameters: the CPU benchmark workload",
               "hzpbench (issue 5)",
               shape("small", 8, 512, 8, 4, 64, 1408, 8192, 256, 4096, 1e4, 1e-5, true), train(8, 1, 300, 30, 1e-3, Precision::fp32),
               chain()});
  p.push_back({"1b", "Llama-3.2-1B shape, ~1.24B parameters",
               "Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): rope_theta 5e5, tied embeddings",
               shape("1b", 16, 2048, 32, 8, 64, 8192, 128256, 4096, 131072, 5e5, 1e-5, true),
               train(256, 1, 1000, 100, 3e-4, Precision::bf16_mixed), chain()});
  p.push_back({"9b", "assumed ~9B Seed-OSS-like shape (the paper publishes none), ~9.36B parameters",
               "assumed: the AsyncHZP paper's Seed-OSS-9B has no published configuration; 40 layers, d=4096, "
               "32/8 heads of 128, SwiGLU 14336, Seed-OSS vocabulary and RoPE base, tied embeddings",
               shape("9b", 40, 4096, 32, 8, 128, 14336, 155136, 32768, 131072, 1e7, 1e-6, true),
               train(512, 1, 1000, 100, 3e-4, Precision::bf16_mixed), chain()});
  p.push_back({"seed-oss-36b", "Seed-OSS-36B, ~36.15B parameters (published: 36B)",
               "ByteDance-Seed/Seed-OSS-36B-Base README and config: 64 layers, d=5120, 80/8 heads of 128, SwiGLU "
               "27648, vocab 155136, RoPE base 1e7, 512K context, untied; QKV biases (0.8M) not modelled",
               shape("seed-oss-36b", 64, 5120, 80, 8, 128, 27648, 155136, 32768, 524288, 1e7, 1e-6, false),
               train(512, 1, 1000, 100, 1.5e-4, Precision::bf16_mixed), chain()});
  // The MoE presets (docs/workloads.md, "Mixture of Experts"). Each routed and shared expert is 1/3 of the dense
  // width it replaces, so tiny-moe and small-moe spend as many FLOPs per token (top-2 + 1 shared = 3 experts) as
  // tiny and small while holding 8 experts' weights in each MoE block; the first block stays dense, as
  // DeepSeek-V3's first three do.
  p.push_back({"tiny-moe", "tiny with 8 routed experts (top-2) + 1 shared in blocks 1-3: trains in seconds on one core",
               "hzpbench (issue 21): tiny's shape, experts of width 64 = 192 / 3",
               with_experts(shape("tiny-moe", 4, 64, 4, 2, 16, 192, 64, 64, 1024, 1e4, 1e-5, true), 8, 2, 1, 64, 1),
               train(16, 2, 300, 30, 3e-3, Precision::fp32), chain()});
  p.push_back({"small-moe", "small with 8 routed experts (top-2) + 1 shared in blocks 1-7: the CPU MoE benchmark",
               "hzpbench (issue 21): small's shape, experts of width 352 (about 1408 / 4, a multiple of 32)",
               with_experts(shape("small-moe", 8, 512, 8, 4, 64, 1408, 8192, 256, 4096, 1e4, 1e-5, true), 8, 2, 1, 352, 1),
               train(8, 1, 300, 30, 1e-3, Precision::fp32), chain()});
  // moe-100b: assumed (the AsyncHZP paper calls its MoE-100B "DeepSeek-V3-like" and publishes no shape). Taken from
  // DeepSeek-V3 (arXiv 2412.19437, config.json): 1 shared expert, 8 routed per token, sigmoid scores with
  // auxiliary-loss-free bias balancing, the first 3 blocks dense, vocabulary 129,280, untied. Chosen to land near
  // 100B: width 4096 with 32/8 GQA heads of 128 (MLA is not modelled), 60 blocks (divisible by the paper's PP = 6),
  // 128 routed experts (divisible by its EP = 8) of width 1024 (V3: 256 of 2048 at d = 7168), dense MLP 12,288 = 3d.
  // Sequence 32K as the paper's other models (its CP = 8).
  p.push_back({"moe-100b", "assumed DeepSeek-V3-like MoE, ~96.6B parameters, ~10.5B active per token",
               "assumed: the AsyncHZP paper's MoE-100B has no published configuration; DeepSeek-V3's routing (8 of "
               "N routed + 1 shared, sigmoid, bias balancing, 3 dense blocks, V=129280) on 60 blocks of d=4096, "
               "32/8 heads of 128, 128 experts of 1024, dense MLP 12288, untied",
               with_experts(shape("moe-100b", 60, 4096, 32, 8, 128, 12288, 129280, 32768, 131072, 1e4, 1e-6, false),
                            128, 8, 1, 1024, 3),
               train(512, 1, 1000, 100, 2.2e-4, Precision::bf16_mixed), chain()});
  return p;
}

}  // namespace

std::span<const ModelPreset> model_presets() {
  static const std::vector<ModelPreset> presets = build();
  return presets;
}

const ModelPreset& model_preset(std::string_view name) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return p;
  std::ostringstream choices;
  for (const ModelPreset& p : model_presets()) choices << (choices.tellp() > 0 ? ", " : "") << p.name;
  HZP_THROW(ConfigError, "model.preset = \"", name, "\" is not a preset; choices: ", choices.str());
}

}  // namespace hzp::workloads
