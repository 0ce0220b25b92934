// The Llama-style dense decoder (workloads/llama/): its configuration (`model.*` keys), parameter and
// FLOP counts that need no allocation (so the 36B preset can be planned on a laptop), and the factory
// that builds it as a Workload of units: embedding; L transformer blocks (RMSNorm → attention with RoPE
// and GQA → residual → RMSNorm → SwiGLU → residual); head (final RMSNorm + LM head, tied or untied).
// Mixture of Experts is an extension of this decoder, not a kind of its own (model.experts > 0; moe.hpp):
// an MoE block is the same block with its MLP replaced by shared experts (the dense SwiGLU code at width
// shared_experts·expert_ffn) plus routed experts, so attention, the ends, recompute, pipeline stages, presets
// and the factory are shared as they are, and experts = 0 leaves the dense model exactly as it was.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hzp/kernels/attention.hpp"
#include "hzp/workloads/context_parallel.hpp"
#include "hzp/workloads/expert_parallel.hpp"
#include "hzp/workloads/moe.hpp"
#include "hzp/workloads/param_layout.hpp"
#include "hzp/workloads/precision.hpp"
#include "hzp/workloads/ring_attention.hpp"
#include "hzp/workloads/tensor_parallel.hpp"
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
  /// Which attention kernel runs on a GPU (model.attention; kernels/attention.hpp). Not part of the shape:
  /// every choice computes the same function to its precision.
  kernels::AttentionImpl attention = kernels::AttentionImpl::automatic;
  /// Mixture of Experts (experts = 0: dense). Blocks dense_layers.. replace the MLP by the MoE FFN.
  MoeConfig moe;
  /// The preset this came from, for messages ("" when none).
  std::string preset;

  /// head_dim with the default applied.
  std::int64_t resolved_head_dim() const noexcept { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  /// ConfigError listing every problem at once, each naming its key(s) and value(s): zero or negative
  /// sizes, heads not divisible by kv_heads, hidden not divisible by heads when head_dim is defaulted,
  /// odd head_dim (RoPE pairs), seq_len above max_seq_len, vocab beyond int32 tokens, bad rope_base/eps.
  void validate() const;

  // ---- counts (pure arithmetic on the shape; nothing is allocated) ----
  /// Parameters of transformer block `layer` (two norm gains, q/k/v/o, gate/up/down; an MoE block: the
  /// shared experts' gate/up/down, the router and every routed expert's gate/up/down).
  std::int64_t block_params(std::int64_t layer = 0) const noexcept;
  /// The SwiGLU width of block `layer`'s dense part: ffn_hidden, or shared_experts·expert_ffn in an MoE block.
  std::int64_t mlp_width(std::int64_t layer) const noexcept;
  /// Every parameter once (N; a tied embedding counts once).
  std::int64_t num_params() const noexcept;
  /// Weights used in matmuls: the blocks' projections and the LM head (counted even when tied to the
  /// embedding, whose lookup is not a matmul); norm gains excluded. With experts, the ACTIVE ones: per MoE
  /// block the router, the shared experts and top_k routed experts (what one token's FLOPs are made of).
  std::int64_t num_matmul_params() const noexcept;
  /// Parameters one token uses (N with only top_k of each MoE block's routed experts): N when dense.
  std::int64_t num_active_params() const noexcept;
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
///
/// With tensor parallelism over `tp_size` ranks (Megatron's layout), rank `tp_rank` holds, of every block,
/// the column-parallel pieces of wq, wk, wv (its H/tp query and KV/tp key/value heads, contiguous) and of
/// w_gate, w_up (F/tp rows), the row-parallel pieces of wo and w_down (the matching columns), and V/tp
/// consecutive vocabulary rows of tok_embeddings and lm_head (vocabulary-parallel ends); the norms are whole on
/// every rank. Each piece records its shard (dim, tp_rank, tp_size, group "tp") and where the whole tensor sits
/// in the unsharded layout, so it initialises to its slice of the unsharded model's tensor. ConfigError
/// (check_tensor_parallel) unless tp divides heads, kv_heads, ffn_hidden and vocab.
ParamLayout llama_layout(const LlamaConfig& config, int tp_size = 1, int tp_rank = 0);

/// ConfigError naming model.heads, model.kv_heads, model.ffn_hidden, model.vocab and tp unless tp (>= 1) divides
/// all four (the vocabulary is not padded).
void check_tensor_parallel(const LlamaConfig& config, int tp);

/// The layout of rank `ep_rank` of an expert-parallel group of `ep` over llama_layout(config, tp, tp_rank): every
/// MoE block's moe.w_gate, moe.w_up and moe.w_down cut along the expert dimension into ep pieces, this rank's E/ep
/// consecutive experts (shard group "ep"), each piece initialised to its slice of the unsharded tensor; every other
/// tensor as the tensor-parallel layout has it (whole at tp = 1). Under tp the routed experts and the router are
/// not split over tp (expert tensor parallelism 1) and carry grad_summed_over "tp". check_expert_parallel first.
ParamLayout llama_expert_parallel_layout(const LlamaConfig& config, int ep, int ep_rank, int tp = 1, int tp_rank = 0);

/// ConfigError naming the key, the value and the fix unless expert parallelism over `ep` ranks fits `config`: the
/// model has experts (model.experts > 0) and ep divides model.experts. Tensor parallelism (`tp`) composes.
void check_expert_parallel(const LlamaConfig& config, int ep, int tp = 1);

/// The expert-parallel collectives one micro-batch issues in unit `unit`'s forward or backward (recompute's repeated
/// forward included), for the plan (llama_tp_calls.cpp): per MoE block and pass, an all-to-all of the row counts
/// (forward only) and two all-to-all-v of rows (dispatch and combine), the all-to-all-v at the balanced
/// expectation. Empty at ep = 1 and outside MoE blocks.
std::vector<ExpertParallelCall> llama_expert_parallel_calls(const LlamaConfig& config, int unit, bool backward,
                                                            const ExpertParallelRun& run);

/// The tensor-parallel collectives one micro-batch of the model issues in unit `unit`'s forward (`backward`
/// false) or backward (recompute included), for the plan; what the model's code calls, written beside it
/// (llama_tp_calls.cpp). Empty at tp = 1.
std::vector<TensorParallelCall> llama_tensor_parallel_calls(const LlamaConfig& config, int unit, bool backward,
                                                            const TensorParallelRun& run);

/// The ring-attention messages of one micro-batch in unit `unit`'s forward or backward under context parallelism
/// (llama_tp_calls.cpp, beside the tensor-parallel calls): every block sends RingAttention::messages() of its
/// rank's heads in forward, and in backward those of the backward pass plus, under recompute, the forward's again.
RingAttentionMessages llama_context_parallel_messages(const LlamaConfig& config, int unit, bool backward,
                                                      const TensorParallelRun& run);

/// Builds the model (validating `config`). Cheap: holds no parameters; activations live in contexts. With a
/// tensor-parallel group the model runs its rank's pieces (llama_layout above). Without sequence parallelism
/// it sums the row-parallel outputs over the group (an all-reduce after wo and after w_down in forward) and
/// the column-parallel inputs' gradients (before each block's two norms in backward); a recompute repeats the
/// attention's forward all-reduce (the MLP output is not rebuilt). With it, each of those all-reduces becomes
/// an all-gather (forward: the normed input; backward: the output gradient) or a reduce-scatter, the activation
/// between units is the rank's [tokens/tp, d] rows. The ends are vocabulary-parallel: the embedding looks up
/// every token in its V/tp rows (zero elsewhere) and sums the partial lookups like a row-parallel output; the
/// head computes its [tokens, V/tp] logits and the softmax cross-entropy from row maxima and sums of
/// exponentials all-reduced over the group (full-vocabulary logits never exist on a rank), and sums its input
/// gradient like a column-parallel input's. Every context's micro-batch must run on every rank of the group in
/// the same order; tokens per micro-batch must divide by tp under sequence parallelism. With a pipeline `stage` cut
/// the layout is stage_layout()'s: only that stage's units' parameters (and a tied table they use) are held.
/// With a context-parallel group `cp` the model runs its ContextShard of every sequence (context_shard(); a
/// context takes local_seq_len() tokens per sequence, host backend only): RoPE at the shard's global positions
/// and ring attention over the group in every block (forward, backward, and again in a recompute); every other
/// layer is per token. The loss it reports is its tokens' share; the group's shares add up to the micro-batch's.
/// With an expert-parallel group `ep` the model holds llama_expert_parallel_layout's pieces and its MoE layers send
/// their kept rows to the experts' ranks and take the outputs back (moe_experts_forward's exchanges), forward,
/// backward and recompute; every rank of the group must run the same MoE layers' micro-batches in the same order.
std::unique_ptr<Workload> make_llama(const LlamaConfig& config, Precision precision, const TensorParallel& tp = {},
                                     const StageCut& stage = {}, const ContextParallel& cp = {},
                                     const ExpertParallel& ep = {});

}  // namespace hzp::workloads
