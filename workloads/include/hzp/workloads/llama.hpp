// The Llama-style dense decoder (workloads/llama/): its configuration (`model.*` keys), parameter and
// FLOP counts that need no allocation (so the 36B preset can be planned on a laptop), and the factory
// that builds it as a Workload of units: embedding; L transformer blocks (RMSNorm → attention with RoPE
// and GQA → residual → RMSNorm → SwiGLU → residual); head (final RMSNorm + LM head, tied or untied).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hzp/workloads/param_layout.hpp"
#include "hzp/workloads/precision.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::workloads {

/// The `model.*` keys.
struct LlamaConfig {
  std::int64_t layers = 4;
  std::int64_t hidden = 64;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 0;  ///< 0 = hidden / heads (must then divide evenly)
  std::int64_t ffn_hidden = 192;
  std::int64_t vocab = 64;
  std::int64_t seq_len = 64;
  /// Longest seq_len the preset allows (its trained context, or the quadratic-cost guard of the
  /// small presets); 0 = no limit.
  std::int64_t max_seq_len = 0;
  double rope_base = 10000.0;
  double norm_eps = 1e-5;
  bool tied_embeddings = true;
  /// The preset this came from, for messages ("" when none).
  std::string preset;

  /// head_dim with the default applied.
  std::int64_t resolved_head_dim() const noexcept { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  /// ConfigError listing every problem at once, each naming its key(s) and value(s): zero or negative
  /// sizes, heads not divisible by kv_heads, hidden not divisible by heads when head_dim is defaulted,
  /// odd head_dim (RoPE pairs), seq_len above max_seq_len, vocab beyond int32 tokens, bad rope_base/eps.
  void validate() const;

  // ---- counts (pure arithmetic on the shape; nothing is allocated) ----
  /// Parameters of one transformer block (two norm gains, q/k/v/o, gate/up/down).
  std::int64_t block_params() const noexcept;
  /// Every parameter once (N; a tied embedding counts once).
  std::int64_t num_params() const noexcept;
  /// Weights used in matmuls: the blocks' projections and the LM head (counted even when tied to the
  /// embedding, whose lookup is not a matmul); norm gains excluded.
  std::int64_t num_matmul_params() const noexcept;
  /// See FlopsPerToken (workload.hpp).
  FlopsPerToken flops_per_token() const noexcept;
  /// "llama L=4 d=64 heads=4/2 hd=16 ffn=192 V=64 T=64 tied"
  std::string describe() const;
};

/// The unit layout of `config` (validated): unit 0 "embedding" (tok_embeddings [V, d]); units 1..L
/// "block.i" (attn_norm [d], wq [H·hd, d], wk [KV·hd, d], wv [KV·hd, d], wo [d, H·hd], mlp_norm [d],
/// w_gate [F, d], w_up [F, d], w_down [d, F]); unit L+1 "head" (final_norm [d], and lm_head [V, d] when
/// untied; uses = {0} when tied). Initialisation: normal(0, 0.02) everywhere except the two output
/// projections per block (wo, w_down), scaled by 1/sqrt(2L) (GPT-2's residual scaling, so the residual
/// stream's variance does not grow with depth), and the norm gains, which start at 1.
ParamLayout llama_layout(const LlamaConfig& config);

/// Builds the model (validating `config`). Cheap: holds no parameters; activations live in contexts.
std::unique_ptr<Workload> make_llama(const LlamaConfig& config, Precision precision);

}  // namespace hzp::workloads
