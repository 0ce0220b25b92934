// The workload factory (model_factory.hpp): the registered model kinds, the `model.*` keys and the model
// presets (shapes with their training and data defaults, taken from model_presets() so they live in one
// place), and the Llama decoder's spec built from a resolved configuration.
#include "hzp/workloads/model_factory.hpp"

#include <array>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hzp/core/enum_option.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/workloads/presets.hpp"
#include "llama/llama_activations.hpp"

namespace hzp::workloads {
namespace {

using S = OptionSpec;

std::vector<std::pair<std::string, OptionValue>> preset_values(const ModelPreset& p) {
  const auto& m = p.model;
  const auto& t = p.train;
  using I = std::int64_t;
  return {
      {"model.layers", I{m.layers}},
      {"model.hidden", I{m.hidden}},
      {"model.heads", I{m.heads}},
      {"model.kv_heads", I{m.kv_heads}},
      {"model.head_dim", I{m.head_dim}},
      {"model.ffn_hidden", I{m.ffn_hidden}},
      {"model.vocab", I{m.vocab}},
      {"model.seq_len", I{m.seq_len}},
      {"model.max_seq_len", I{m.max_seq_len}},
      {"model.rope_base", m.rope_base},
      {"model.norm_eps", m.norm_eps},
      {"model.tied_embeddings", m.tied_embeddings},
      {"model.experts", I{m.moe.experts}},
      {"model.top_k", I{m.moe.top_k}},
      {"model.expert_ffn", I{m.moe.expert_ffn}},
      {"model.shared_experts", I{m.moe.shared_experts}},
      {"model.dense_layers", I{m.moe.dense_layers}},
      {"model.router_score", std::string(to_string(m.moe.router_score))},
      {"model.balance", std::string(to_string(m.moe.balance))},
      {"model.bias_update_rate", m.moe.bias_update_rate},
      {"model.aux_loss_coef", m.moe.aux_loss_coef},
      {"model.capacity_factor", m.moe.capacity_factor},
      {"train.global_batch", I{t.global_batch}},
      {"train.micro_batch_size", I{t.micro_batch_size}},
      {"train.steps", I{t.steps}},
      {"train.warmup_steps", I{t.warmup_steps}},
      {"train.lr", t.lr},
      {"train.lr_min", t.lr_min},
      {"train.clip", t.clip},
      {"train.weight_decay", t.weight_decay},
      {"train.beta1", t.beta1},
      {"train.beta2", t.beta2},
      {"train.precision", std::string(to_string(t.precision))},
      {"data.synthetic.order", I{p.chain.order}},
      {"data.synthetic.successors", I{p.chain.successors}},
      {"data.synthetic.concentration", p.chain.concentration},
  };
}

void register_llama_keys(OptionTable& t) {
  const ModelPreset& tiny = model_preset("tiny");
  // Key defaults are tiny's shape; the presets fill the rest (register_model_presets).
  const auto& m = tiny.model;
  t.add(S::integer("model.layers", m.layers, "Transformer blocks").positive());
  t.add(S::integer("model.hidden", m.hidden, "Model width d (residual stream)").positive());
  t.add(S::integer("model.heads", m.heads, "Query heads").positive());
  t.add(S::integer("model.kv_heads", m.kv_heads, "Key/value heads (grouped-query attention); must divide model.heads")
            .positive());
  t.add(S::integer("model.head_dim", m.head_dim, "Dimension of one head; 0 = model.hidden / model.heads").non_negative());
  t.add(S::integer("model.ffn_hidden", m.ffn_hidden, "SwiGLU inner width").positive());
  t.add(S::integer("model.vocab", m.vocab, "Vocabulary size (the synthetic chain's too)").at_least(2));
  t.add(S::integer("model.seq_len", m.seq_len, "Tokens per sequence (T)").positive().with_unit("tokens"));
  t.add(S::integer("model.max_seq_len", m.max_seq_len,
                   "Longest model.seq_len the preset allows (its context length); 0 = no limit")
            .non_negative()
            .with_unit("tokens"));
  t.add(S::real("model.rope_base", m.rope_base, "RoPE frequency base theta").above(1));
  t.add(S::real("model.norm_eps", m.norm_eps, "RMSNorm epsilon").non_negative());
  t.add(S::boolean("model.tied_embeddings", m.tied_embeddings,
                   "The LM head reads the embedding table (stored once, in the embedding unit)"));
  t.add(enum_option_spec("model.attention", kernels::kAttentionImplNames, m.attention,
                       "Attention kernel on a GPU (docs/cuda.md): fused = cuDNN's fused SDPA (bf16), unfused = "
                       "the cuBLASLt GEMMs around a softmax kernel (its reference), auto = fused where it runs. "
                       "The CPU always runs its tiled kernel (fused is refused there)"));
  // Mixture of Experts (workloads/moe.hpp): an extension of this decoder; experts = 0 is the dense model.
  const MoeConfig& moe = m.moe;
  t.add(S::integer("model.experts", moe.experts,
                   "Routed experts per MoE block; 0 = dense (every model.* MoE key below is then ignored)")
            .non_negative());
  t.add(S::integer("model.top_k", moe.top_k, "Routed experts per token (1..model.experts)"));
  t.add(S::integer("model.expert_ffn", moe.expert_ffn, "SwiGLU width of one expert, routed or shared"));
  t.add(S::integer("model.shared_experts", moe.shared_experts,
                   "Always-on experts per MoE block (run as one SwiGLU of shared_experts x expert_ffn)"));
  t.add(S::integer("model.dense_layers", moe.dense_layers,
                   "The first blocks keep the dense MLP of width model.ffn_hidden (DeepSeek-V3: 3)"));
  t.add(enum_option_spec("model.router_score", kRouterScoreNames, moe.router_score,
                       "Router scores: sigmoid per expert (DeepSeek-V3) or softmax over the experts; the chosen "
                       "top_k are normalised to sum to 1 either way"));
  t.add(enum_option_spec("model.balance", kMoeBalanceNames, moe.balance,
                       "Load balancing: bias = DeepSeek-V3's auxiliary-loss-free per-expert bias, added to the scores "
                       "for choosing only and moved by model.bias_update_rate once per step against the global "
                       "batch's load; aux_loss = switch-style loss model.aux_loss_coef x E x sum_e f_e P_e"));
  t.add(S::real("model.bias_update_rate", moe.bias_update_rate,
                "gamma of the bias rule b_e += gamma x sign(mean load - load_e), once per step (DeepSeek-V3: 0.001)"));
  t.add(S::real("model.aux_loss_coef", moe.aux_loss_coef,
                "alpha of the auxiliary loss (model.balance = aux_loss; Switch Transformer: 0.01). Added to the "
                "objective, not to the reported loss"));
  t.add(S::real("model.capacity_factor", moe.capacity_factor,
                "0 = dropless; else each expert takes at most ceil(cf x tokens x top_k / experts) assignments of a "
                "micro-batch, admitted token by token (each token's choices in rank order), and drops the rest"));
}

class LlamaSpec final : public ModelSpec {
 public:
  explicit LlamaSpec(LlamaConfig c) : c_(std::move(c)) {}
  std::string kind() const override { return "llama"; }
  std::string describe() const override { return c_.describe(); }
  std::int64_t num_params() const override { return c_.num_params(); }
  std::int64_t seq_len() const override { return c_.seq_len; }
  std::int64_t vocab() const override { return c_.vocab; }
  FlopsPerToken flops_per_token() const override { return c_.flops_per_token(); }
  ParamLayout layout() const override { return llama_layout(c_); }
  ParamLayout tensor_parallel_layout(int tp, int tp_rank) const override { return llama_layout(c_, tp, tp_rank); }
  ParamLayout expert_parallel_layout(int ep, int ep_rank, int tp, int tp_rank) const override {
    return llama_expert_parallel_layout(c_, ep, ep_rank, tp, tp_rank);
  }
  std::int64_t step_statistics() const override {  // MoeBalanceState's [load][dropped][aux] over every MoE block
    return c_.moe.enabled() ? (c_.layers - c_.moe.dense_layers) * (c_.moe.experts + 2) : 0;
  }
  ActiveReads active_reads(int unit) const override {
    const ParamLayout l = layout();
    const double fraction = c_.moe.enabled() ? static_cast<double>(c_.moe.top_k) / static_cast<double>(c_.moe.experts) : 1;
    ActiveReads r;
    for (const ParamTensor& t : l.unit(unit).tensors) {
      const bool routed = t.name.ends_with("moe.w_gate") || t.name.ends_with("moe.w_up") || t.name.ends_with("moe.w_down");
      const double n = static_cast<double>(t.numel()) * (routed ? fraction : 1.0);
      r.total += n;
      if (routed) r.routed += n;
    }
    return r;
  }
  std::vector<ExpertParallelCall> expert_parallel_calls(int unit, bool backward,
                                                        const ExpertParallelRun& run) const override {
    return llama_expert_parallel_calls(c_, unit, backward, run);
  }
  std::vector<TensorParallelCall> tensor_parallel_calls(int unit, bool backward,
                                                        const TensorParallelRun& run) const override {
    return llama_tensor_parallel_calls(c_, unit, backward, run);
  }
  UnitActivationBytes activation_bytes(int unit, const TensorParallelRun& run) const override {
    return llama::llama_activation_bytes(c_, unit, run);
  }
  Linear widest_linear() const override { return {c_.ffn_hidden, c_.hidden}; }
  RingAttentionMessages context_parallel_messages(int unit, bool backward,
                                                  const TensorParallelRun& run) const override {
    return llama_context_parallel_messages(c_, unit, backward, run);
  }
  std::int64_t boundary_elements(std::int64_t micro_batch_size, int tp, bool sequence_parallel,
                                 int cp) const override {
    return micro_batch_size * c_.seq_len / cp / (sequence_parallel ? tp : 1) * c_.hidden;
  }
  std::unique_ptr<Workload> build(Precision precision, const TensorParallel& tp, const StageCut& stage,
                                  const ContextParallel& cp, const ExpertParallel& ep) const override {
    return make_llama(c_, precision, tp, stage, cp, ep);
  }

 private:
  LlamaConfig c_;
};

struct Kind {
  const char* name;
  void (*register_keys)(OptionTable&);
  std::unique_ptr<ModelSpec> (*from_config)(const ResolvedConfig&);
};

std::unique_ptr<ModelSpec> llama_from(const ResolvedConfig& c) { return llama_spec(llama_config_from(c)); }

// One line per model kind; the first is the default.
constexpr std::array kKinds = {Kind{"llama", &register_llama_keys, &llama_from}};

}  // namespace

std::vector<std::string> model_kinds() {
  std::vector<std::string> names;
  for (const Kind& k : kKinds) names.emplace_back(k.name);
  return names;
}

void register_model_options(OptionTable& t) {
  t.add(S::enumeration("model.kind", model_kinds(), kKinds.front().name,
                       "Which model the workload factory builds (docs/workloads.md); its shape keys follow"));
  t.add(S::enumeration("model.preset", {"tiny"}, "tiny",
                       "Model shape with its training and data defaults (tiny, small, 1b, 9b, seed-oss-36b, tiny-moe, "
                       "small-moe, moe-100b; "
                       "docs/workloads.md); any model.*, train.* or data.* key set explicitly overrides it"));
  for (const Kind& k : kKinds) k.register_keys(t);
}

void register_model_presets(OptionTable& t) {
  for (const ModelPreset& p : model_presets()) t.add_preset("model.preset", p.name, preset_values(p), p.meaning);
}

std::unique_ptr<ModelSpec> model_spec_from(const ResolvedConfig& c) {
  const std::string kind = c.get_string("model.kind");
  for (const Kind& k : kKinds)
    if (kind == k.name) return k.from_config(c);
  HZP_THROW(ConfigError, "model.kind = \"", kind, "\" is not a registered model kind");  // the enumeration refuses it first
}

std::unique_ptr<ModelSpec> llama_spec(const LlamaConfig& config) {
  config.validate();
  return std::make_unique<LlamaSpec>(config);
}

LlamaConfig llama_config_from(const ResolvedConfig& c) {
  LlamaConfig m;
  m.preset = c.get_string("model.preset");
  m.layers = c.get_int("model.layers");
  m.hidden = c.get_int("model.hidden");
  m.heads = c.get_int("model.heads");
  m.kv_heads = c.get_int("model.kv_heads");
  m.head_dim = c.get_int("model.head_dim");
  m.ffn_hidden = c.get_int("model.ffn_hidden");
  m.vocab = c.get_int("model.vocab");
  m.seq_len = c.get_int("model.seq_len");
  m.max_seq_len = c.get_int("model.max_seq_len");
  m.rope_base = c.get_double("model.rope_base");
  m.norm_eps = c.get_double("model.norm_eps");
  m.tied_embeddings = c.get_bool("model.tied_embeddings");
  m.attention = kernels::attention_impl_from(c.get_string("model.attention"), "model.attention");
  m.moe.experts = c.get_int("model.experts");
  m.moe.top_k = c.get_int("model.top_k");
  m.moe.expert_ffn = c.get_int("model.expert_ffn");
  m.moe.shared_experts = c.get_int("model.shared_experts");
  m.moe.dense_layers = c.get_int("model.dense_layers");
  m.moe.router_score = router_score_from(c.get_string("model.router_score"), "model.router_score");
  m.moe.balance = moe_balance_from(c.get_string("model.balance"), "model.balance");
  m.moe.bias_update_rate = c.get_double("model.bias_update_rate");
  m.moe.aux_loss_coef = c.get_double("model.aux_loss_coef");
  m.moe.capacity_factor = c.get_double("model.capacity_factor");
  m.validate();
  return m;
}

}  // namespace hzp::workloads
