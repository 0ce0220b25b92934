// LlamaConfig: validation with messages naming every key and value involved, parameter and FLOP
// counts from the shape alone, and the unit layout (llama.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/workloads/llama.hpp"

namespace hzp::workloads {

void LlamaConfig::validate() const {
  std::vector<std::string> problems;
  auto add = [&](auto&&... parts) { problems.push_back(detail::concat(parts...)); };
  const auto positive = [&](const char* key, std::int64_t v) {
    if (v <= 0) add(key, " = ", v, " must be positive");
  };
  positive("model.layers", layers);
  positive("model.hidden", hidden);
  positive("model.heads", heads);
  positive("model.kv_heads", kv_heads);
  positive("model.ffn_hidden", ffn_hidden);
  positive("model.seq_len", seq_len);
  if (head_dim < 0) add("model.head_dim = ", head_dim, " must be positive, or 0 for hidden / heads");
  if (vocab < 2) add("model.vocab = ", vocab, " must be at least 2");
  if (vocab > std::numeric_limits<std::int32_t>::max())
    add("model.vocab = ", vocab, " exceeds the int32 token range (", std::numeric_limits<std::int32_t>::max(), ")");
  if (heads > 0 && kv_heads > 0 && heads % kv_heads != 0)
    add("model.heads = ", heads, " is not divisible by model.kv_heads = ", kv_heads,
        " (each key/value head serves a whole group of query heads)");
  if (head_dim == 0 && heads > 0 && hidden > 0 && hidden % heads != 0)
    add("model.hidden = ", hidden, " is not divisible by model.heads = ", heads,
        "; set model.head_dim explicitly");
  const std::int64_t hd = resolved_head_dim();
  if (hd > 0 && hd % 2 != 0) add("head_dim = ", hd, " (model.head_dim, or model.hidden / model.heads) must be even (RoPE rotates pairs of elements)");
  if (heads > 0 && hidden > 0 && hd == 0) add("head_dim resolves to 0 (model.hidden = ", hidden, " < model.heads = ", heads, ")");
  if (max_seq_len < 0) add("model.max_seq_len = ", max_seq_len, " must be >= 0 (0 = no limit)");
  if (max_seq_len > 0 && seq_len > max_seq_len)
    add("model.seq_len = ", seq_len, " exceeds ", preset.empty() ? "" : "preset " + preset + "'s ",
        "limit model.max_seq_len = ", max_seq_len);
  if (!(rope_base > 1.0) || !std::isfinite(rope_base)) add("model.rope_base = ", rope_base, " must be a finite number > 1");
  if (!(norm_eps >= 0.0) || !std::isfinite(norm_eps)) add("model.norm_eps = ", norm_eps, " must be finite and >= 0");
  moe.collect_problems(layers, problems);
  if (problems.empty()) {
    // Sizes each in range can still multiply past what the layout's offsets hold (2^63-1 layers, a width of 2^40):
    // the counts would wrap, or the layout loop would not end. Estimated in floating point, before any is computed.
    const double d = static_cast<double>(hidden), hd_ = static_cast<double>(resolved_head_dim());
    const double mlp = 3.0 * d * std::max(static_cast<double>(ffn_hidden), static_cast<double>(moe.shared_experts) * moe.expert_ffn) +
                       static_cast<double>(moe.experts) * d * (1.0 + 3.0 * static_cast<double>(moe.expert_ffn));
    const double block = 2.0 * d + 2.0 * d * hd_ * static_cast<double>(heads + kv_heads) + mlp;
    const double n = static_cast<double>(layers) * block + 2.0 * static_cast<double>(vocab) * d + d;
    if (!(n < 0x1p53))
      add("the shape gives ~", n, " parameters (model.layers = ", layers, ", model.hidden = ", hidden, ", model.heads = ",
          heads, ", model.ffn_hidden = ", ffn_hidden, ", model.vocab = ", vocab, ", model.experts = ", moe.experts,
          ", model.expert_ffn = ", moe.expert_ffn,
          ", model.shared_experts = ", moe.shared_experts, ", model.head_dim = ", head_dim, "), beyond the 2^53 that parameter offsets and counts hold exactly");
  }
  if (problems.empty()) return;
  std::ostringstream os;
  os << "invalid model configuration" << (preset.empty() ? "" : " (preset " + preset + ")") << ":";
  for (const auto& p : problems) os << "\n  - " << p;
  os << "\n  fix: change the model.* values named above so that each rule stated there holds";
  HZP_THROW(ConfigError, os.str());
}

std::int64_t LlamaConfig::mlp_width(std::int64_t layer) const noexcept {
  return moe.is_moe_layer(layer) ? moe.shared_experts * moe.expert_ffn : ffn_hidden;
}

namespace {
// One block's parameters with `routed` of its routed experts counted (all of them, or the top_k a token uses).
std::int64_t block_params_with(const LlamaConfig& c, std::int64_t layer, std::int64_t routed) {
  const std::int64_t hd = c.resolved_head_dim();
  const std::int64_t attn = c.hidden * c.heads * hd * 2 + c.hidden * c.kv_heads * hd * 2;  // wq, wo; wk, wv
  std::int64_t mlp = 3 * c.hidden * c.mlp_width(layer);
  if (c.moe.is_moe_layer(layer)) mlp += c.moe.experts * c.hidden + routed * 3 * c.hidden * c.moe.expert_ffn;
  return 2 * c.hidden + attn + mlp;
}
}  // namespace

std::int64_t LlamaConfig::block_params(std::int64_t layer) const noexcept {
  return block_params_with(*this, layer, moe.experts);
}

std::int64_t LlamaConfig::num_params() const noexcept {
  const std::int64_t emb = vocab * hidden;
  std::int64_t blocks = 0;
  for (std::int64_t l = 0; l < layers; ++l) blocks += block_params(l);
  return emb + blocks + hidden + (tied_embeddings ? 0 : emb);
}

std::int64_t LlamaConfig::num_active_params() const noexcept {
  std::int64_t routed_idle = 0;
  for (std::int64_t l = 0; l < layers; ++l) routed_idle += block_params(l) - block_params_with(*this, l, moe.top_k);
  return num_params() - routed_idle;
}

std::int64_t LlamaConfig::num_matmul_params() const noexcept {
  std::int64_t blocks = 0;
  for (std::int64_t l = 0; l < layers; ++l) blocks += block_params_with(*this, l, moe.top_k) - 2 * hidden;
  return blocks + vocab * hidden;
}

FlopsPerToken LlamaConfig::flops_per_token() const noexcept {
  // 6 = 2 (multiply-add) x 3 (forward, input gradient, weight gradient) per matmul weight per token.
  // Attention: QK^T and PV are 2·T·hd multiply-adds per head and token each in forward, x3 for
  // backward: 12·L·H·hd·T without the causal discount.
  const double dense = 6.0 * static_cast<double>(num_matmul_params());
  const double attn = 12.0 * static_cast<double>(layers) * static_cast<double>(heads) *
                      static_cast<double>(resolved_head_dim()) * static_cast<double>(seq_len);
  return {dense + attn, dense + 0.5 * attn, moe.enabled()};
}

std::string LlamaConfig::describe() const {
  std::ostringstream os;
  os << "llama L=" << layers << " d=" << hidden << " heads=" << heads << "/" << kv_heads
     << " hd=" << resolved_head_dim() << " ffn=" << ffn_hidden << " V=" << vocab << " T=" << seq_len
     << (tied_embeddings ? " tied" : " untied");
  if (moe.enabled())
    os << " moe E=" << moe.experts << " k=" << moe.top_k << " shared=" << moe.shared_experts
       << " expert_ffn=" << moe.expert_ffn << " dense_layers=" << moe.dense_layers << " " << to_string(moe.router_score)
       << " " << to_string(moe.balance)
       << (moe.capacity_factor > 0 ? " cf=" + std::to_string(moe.capacity_factor) : std::string(" dropless"));
  return os.str();
}

void check_tensor_parallel(const LlamaConfig& c, int tp) {
  // An MoE block's shared experts are one SwiGLU of S·F, split over tp like the dense MLP.
  const std::int64_t shared = c.moe.enabled() ? c.moe.shared_experts * c.moe.expert_ffn : 0;
  if (tp > 1 && shared % tp != 0)
    HZP_THROW(ConfigError, "tensor parallelism over tp = ", tp, " ranks splits an MoE block's shared experts (one "
              "SwiGLU of model.shared_experts x model.expert_ffn = ", c.moe.shared_experts, " x ", c.moe.expert_ffn,
              " = ", shared, ") like the dense MLP, so tp must divide ", shared, "; fix: a tp that divides it");
  const bool ok = tp >= 1 && c.heads % tp == 0 && c.kv_heads % tp == 0 && c.ffn_hidden % tp == 0 && c.vocab % tp == 0;
  // The vocabulary is not padded: a padded row would change the softmax of every token unless masked, and the
  // presets' vocabularies (155,136 and the powers of two) divide by every tp a node holds.
  if (!ok)
    HZP_THROW(ConfigError, "tensor parallelism over tp = ", tp, " ranks splits the heads, the key/value heads, the "
              "MLP's inner width and the vocabulary, so tp must divide model.heads = ", c.heads, ", model.kv_heads = ",
              c.kv_heads, ", model.ffn_hidden = ", c.ffn_hidden, " and model.vocab = ", c.vocab,
              " (the vocabulary is not padded); fix: choose tp among their common divisors");
}

namespace {

// The rank's piece of a tensor of the unsharded layout: cut along `dim` into tp pieces.
ParamTensor piece_of(const ParamTensor& whole, std::int64_t global_offset, int dim, int tp, int rank) {
  ParamTensor t = whole;
  t.shape.dims[static_cast<std::size_t>(dim)] /= tp;
  t.shard = {dim, rank, tp, "tp"};
  t.global_shape = whole.shape;
  t.global_offset = global_offset;
  return t;
}

ParamLayout tensor_parallel_layout(const ParamLayout& whole, int tp, int rank) {
  std::vector<Unit> units;
  for (int u = 0; u < whole.num_units(); ++u) {
    Unit unit = whole.unit(u);
    unit.numel = 0;
    for (std::size_t t = 0; t < unit.tensors.size(); ++t) {
      const ParamTensor& w = whole.unit(u).tensors[t];
      const std::string_view n = w.name;
      // Column-parallel (output rows split) and row-parallel (input columns split) projections; the embedding
      // table and the LM head split by vocabulary rows.
      // An MoE block's shared experts are split as the dense MLP is.
      const bool column = n.ends_with("attn.wq") || n.ends_with("attn.wk") || n.ends_with("attn.wv") ||
                          n.ends_with("mlp.w_gate") || n.ends_with("mlp.w_up") || n.ends_with("shared.w_gate") ||
                          n.ends_with("shared.w_up") || n == "tok_embeddings" || n == "lm_head";
      const bool row = n.ends_with("attn.wo") || n.ends_with("mlp.w_down") || n.ends_with("shared.w_down");
      const std::int64_t global = whole.tensor_offset(u, static_cast<int>(t));
      if (column || row) unit.tensors[t] = piece_of(w, global, column ? 0 : 1, tp, rank);
      // The router and the routed experts stay whole (expert tensor parallelism 1, as Megatron-Core's MoE parallel
      // folding): each tp rank runs them on its share of the token rows, so their gradients are shares of the sum.
      if (n.find(".moe.") != std::string_view::npos) unit.tensors[t].grad_summed_over = "tp";
      // A whole tensor after the first piece sits elsewhere in this layout than in the unsharded one.
      unit.tensors[t].global_offset = global;
      unit.tensors[t].offset = unit.numel;
      unit.numel += unit.tensors[t].numel();
    }
    units.push_back(std::move(unit));
  }
  return ParamLayout(std::move(units));
}

}  // namespace

ParamLayout llama_layout(const LlamaConfig& c, int tp_size, int tp_rank) {
  HZP_CHECK(tp_rank >= 0 && tp_rank < tp_size, "llama_layout: tensor-parallel rank ", tp_rank, " of ", tp_size);
  if (tp_size > 1) {
    check_tensor_parallel(c, tp_size);
    return tensor_parallel_layout(llama_layout(c), tp_size, tp_rank);
  }
  c.validate();
  const std::int64_t d = c.hidden, hd = c.resolved_head_dim(), q = c.heads * hd, kv = c.kv_heads * hd;
  const ParamInit normal{ParamInit::Kind::normal, 0.02};
  // Output projections write into the residual stream once per block each (2L times in all).
  const ParamInit scaled{ParamInit::Kind::normal, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers))};
  const ParamInit ones{ParamInit::Kind::ones, 0.0};

  auto make_unit = [](std::string name, std::vector<std::pair<std::string, std::pair<Shape, ParamInit>>> ts,
                      std::vector<int> uses) {
    Unit u;
    u.name = std::move(name);
    u.uses = std::move(uses);
    for (auto& [tname, spec] : ts) {
      ParamTensor t;
      t.name = tname;
      t.shape = spec.first;
      t.offset = u.numel;
      t.init = spec.second;
      u.numel += t.numel();
      u.tensors.push_back(std::move(t));
    }
    return u;
  };

  std::vector<Unit> units;
  units.push_back(make_unit("embedding", {{"tok_embeddings", {Shape{c.vocab, d}, normal}}}, {}));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    const std::int64_t f = c.mlp_width(l);
    // An MoE block without shared experts has no dense SwiGLU at all (no empty tensors).
    const std::string mlp = c.moe.is_moe_layer(l) ? "shared." : "mlp.";
    std::vector<std::pair<std::string, std::pair<Shape, ParamInit>>> ts = {
        {p + "attn_norm", {Shape{d}, ones}},      {p + "attn.wq", {Shape{q, d}, normal}},
        {p + "attn.wk", {Shape{kv, d}, normal}},  {p + "attn.wv", {Shape{kv, d}, normal}},
        {p + "attn.wo", {Shape{d, q}, scaled}},   {p + "mlp_norm", {Shape{d}, ones}}};
    if (f > 0) {
      ts.push_back({p + mlp + "w_gate", {Shape{f, d}, normal}});
      ts.push_back({p + mlp + "w_up", {Shape{f, d}, normal}});
      ts.push_back({p + mlp + "w_down", {Shape{d, f}, scaled}});
    }
    if (c.moe.is_moe_layer(l)) {
      // Every expert's output projection writes into the residual stream like w_down: the same scaling.
      const std::int64_t E = c.moe.experts, fe = c.moe.expert_ffn;
      ts.push_back({p + "moe.router", {Shape{E, d}, normal}});
      ts.push_back({p + "moe.w_gate", {Shape{E, fe, d}, normal}});
      ts.push_back({p + "moe.w_up", {Shape{E, fe, d}, normal}});
      ts.push_back({p + "moe.w_down", {Shape{E, d, fe}, scaled}});
    }
    units.push_back(make_unit("block." + std::to_string(l), std::move(ts), {}));
  }
  if (c.tied_embeddings)
    units.push_back(make_unit("head", {{"final_norm", {Shape{d}, ones}}}, {0}));
  else
    units.push_back(make_unit("head", {{"final_norm", {Shape{d}, ones}}, {"lm_head", {Shape{c.vocab, d}, normal}}}, {}));
  return ParamLayout(std::move(units));
}

}  // namespace hzp::workloads
