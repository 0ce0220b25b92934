// The Llama decoder's activation bytes (llama_activations.hpp), written down as ledgers that follow the order
// in which llama_ends.cpp and llama_block.cpp allocate and free their activation-tagged tensors. The model's
// own allocations are the reference: tests/workloads/test_llama_activations.cpp checks every number here
// against the allocator's counts in real passes, so a change to a unit's order of allocations that this file
// does not follow fails there.
#include "llama/llama_activations.hpp"

#include "hzp/core/dtype.hpp"
#include "hzp/core/error.hpp"
#include "hzp/workloads/moe.hpp"

namespace hzp::workloads::llama {
namespace {

// Bytes of the tensors one rank's unit handles for one micro-batch (names as in BlockActs and HeadActs).
struct Sizes {
  bool tp = false, sp = false;  // tensor parallelism (a group of more than one) and sequence parallelism
  std::uint64_t x_rows;         // [rows, d]: the residual stream on this rank's rows (all tokens without sp)
  std::uint64_t x_all;          // [tokens, d]: every token of the micro-batch (a matmul's input under sp)
  std::uint64_t stat_rows;      // [rows]: an RMSNorm's 1/rms
  std::uint64_t q, kv, ffn;     // [tokens, heads·hd], [tokens, kv_heads·hd], [tokens, ffn] (this rank's share)
  std::uint64_t lse;            // [batch, heads, seq]
  std::uint64_t logits;         // [tokens, vocab] (the rank's vocabulary columns)
  std::uint64_t stat_tokens;    // [tokens]: per-token losses, one row of the softmax statistics
  std::uint64_t moe = 0;        // an MoE block's routed experts (MoeSaved; 0 in a dense block)
};

Sizes sizes_of(const LlamaConfig& c, const TensorParallelRun& run) {
  HZP_CHECK(run.tp >= 1 && run.cp >= 1 && run.micro_batch_size >= 1 && c.seq_len % run.cp == 0,
            "llama_activation_bytes: tp ", run.tp, ", cp ", run.cp, ", micro-batch ", run.micro_batch_size);
  const std::uint64_t at = dtype_size(activation_dtype(run.precision));
  const std::uint64_t st = run.precision == Precision::fp64 ? 8 : 4;
  const std::uint64_t seq = static_cast<std::uint64_t>(c.seq_len / run.cp);
  const std::uint64_t tokens = static_cast<std::uint64_t>(run.micro_batch_size) * seq;
  const std::uint64_t tp = static_cast<std::uint64_t>(run.tp), hd = static_cast<std::uint64_t>(c.resolved_head_dim());
  Sizes s;
  s.tp = run.tp > 1;
  s.sp = s.tp && run.sequence_parallel;
  const std::uint64_t rows = s.sp ? tokens / tp : tokens;
  const std::uint64_t d = static_cast<std::uint64_t>(c.hidden);
  s.x_rows = rows * d * at;
  s.x_all = tokens * d * at;
  s.stat_rows = rows * st;
  s.q = tokens * static_cast<std::uint64_t>(c.heads) / tp * hd * at;
  s.kv = tokens * static_cast<std::uint64_t>(c.kv_heads) / tp * hd * at;
  s.ffn = tokens * static_cast<std::uint64_t>(c.ffn_hidden) / tp * at;
  s.lse = static_cast<std::uint64_t>(run.micro_batch_size) * static_cast<std::uint64_t>(c.heads) / tp * seq * st;
  s.logits = tokens * static_cast<std::uint64_t>(c.vocab) / tp * at;
  s.stat_tokens = tokens * st;
  return s;
}

// A row-parallel output's sum over the group (sum_partial): in place, or a reduce-scatter into new rows under sp.
// The partial [tokens, d] is allocated before.
void sum_partial(ActivationLedger& l, const Sizes& s) {
  if (!s.sp) return;
  l.alloc(s.x_rows);
  l.free(s.x_all);
}

// norm_for_column_parallel: rstd and the normed rows, gathered to every token under sp.
void norm_for_column_parallel(ActivationLedger& l, const Sizes& s) {
  l.alloc(s.stat_rows);
  l.alloc(s.x_rows);
  if (!s.sp) return;
  l.alloc(s.x_all);
  l.free(s.x_rows);
}

// block_compute up to the MLP's SwiGLU output: what a recompute rebuilds (everything but the output).
void block_internals(ActivationLedger& l, const Sizes& s) {
  norm_for_column_parallel(l, s);  // h1, rstd1
  l.alloc(s.q);
  l.alloc(s.kv);
  l.alloc(s.kv);
  l.alloc(s.q);              // att
  l.alloc(s.lse);
  l.alloc(s.x_all);          // Wo's partial, summed into x2
  sum_partial(l, s);
  norm_for_column_parallel(l, s);  // h2, rstd2
  l.alloc(s.ffn);            // g
  l.alloc(s.ffn);            // u
  l.alloc(s.ffn);            // a
}

// An MoE block's routed experts, after the block's SwiGLU (and after the output's partial when not recomputing):
// their expert-sorted gate, up, SwiGLU and output rows (moe_experts_forward).
void routed_experts(ActivationLedger& l, const Sizes& s) { l.alloc(s.moe); }

UnitActivationBytes block(const Sizes& s, bool recompute) {
  UnitActivationBytes b;
  ActivationLedger f;
  block_internals(f, s);
  f.alloc(s.x_all);  // Wdown's partial, summed into the output
  routed_experts(f, s);
  sum_partial(f, s);
  b.forward_peak = f.peak();
  ActivationLedger rebuilt;  // everything the forward keeps but its output: what a recompute rebuilds
  block_internals(rebuilt, s);
  routed_experts(rebuilt, s);
  b.kept = (recompute ? 0 : static_cast<std::uint64_t>(rebuilt.level())) + s.x_rows;

  // Backward, from the level where the output's gradient dy has taken the output's place.
  ActivationLedger g;
  if (recompute) {
    block_internals(g, s);
    routed_experts(g, s);
  }
  if (s.sp) g.alloc(s.x_all);  // dy gathered
  g.alloc(s.ffn);              // da
  if (s.sp) g.free(s.x_all);
  g.free(s.ffn);               // a
  g.free(s.ffn);               // da (dgate and dup overwrite gate and up)
  g.alloc(s.x_all);            // dh2
  if (s.moe > 0) {             // an MoE block sums dh2 once the routed experts have added their rows' share
    g.free(2 * s.ffn + s.moe);  // g, u, the routed experts' rows
    sum_partial(g, s);
    g.free(s.sp ? s.x_all : s.x_rows);  // h2
  } else {
    sum_partial(g, s);
    g.free(2 * s.ffn + (s.sp ? s.x_all : s.x_rows));  // g, u, h2
  }
  g.alloc(s.x_rows);           // dx2
  g.free(s.sp ? s.x_rows : s.x_all);                // dh2
  g.free(s.stat_rows + s.x_rows);                   // rstd2, x2
  g.free(s.x_rows);                                 // dy
  if (s.sp) g.alloc(s.x_all);  // dx2 gathered
  g.alloc(s.q);                // datt
  if (s.sp) g.free(s.x_all);
  g.alloc(s.q + 2 * s.kv);     // dq, dk, dv
  g.free(s.q);                 // datt
  g.free(2 * s.q + 2 * s.kv + s.lse);               // att, lse, q, k, v
  g.alloc(s.x_all);            // dh1
  sum_partial(g, s);
  g.free(s.q + 2 * s.kv);      // dq, dk, dv
  g.free(s.sp ? s.x_all : s.x_rows);                // h1
  g.alloc(s.x_rows);           // dx, while the input x is still held
  b.backward_peak = g.peak();
  return b;
}

UnitActivationBytes embedding(const Sizes& s) {
  UnitActivationBytes b;
  ActivationLedger f;
  f.alloc(s.x_all);  // the lookup (a partial over the vocabulary under tp)
  sum_partial(f, s);
  b.forward_peak = f.peak();
  b.kept = s.x_rows;
  b.backward_peak = s.sp ? s.x_all : 0;  // every token's output gradient, gathered
  return b;
}

// The head's forward through the logits (the first run and recompute's), then the loss on the first run.
void head_logits(ActivationLedger& l, const Sizes& s) {
  norm_for_column_parallel(l, s);  // h, rstd
  l.alloc(s.logits);
}

UnitActivationBytes head(const Sizes& s, bool recompute) {
  UnitActivationBytes b;
  const std::uint64_t softmax_stats = s.tp ? 3 * s.stat_tokens : 0;  // kept under recompute too
  ActivationLedger f;
  head_logits(f, s);
  const auto logits_state = static_cast<std::uint64_t>(f.level());  // what a recompute rebuilds
  f.alloc(softmax_stats);
  f.alloc(s.stat_tokens);  // the per-token losses
  b.forward_peak = f.peak();
  b.kept = (recompute ? 0 : logits_state) + softmax_stats;

  ActivationLedger g;
  if (recompute) head_logits(g, s);
  g.alloc(s.x_all);           // dh
  g.free(s.logits);
  g.free(s.sp ? s.x_all : s.x_rows);  // h
  sum_partial(g, s);
  g.alloc(s.x_rows);          // the input's gradient, while the input is still held
  b.backward_peak = g.peak();
  return b;
}

}  // namespace

UnitActivationBytes llama_activation_bytes(const LlamaConfig& config, int unit, const TensorParallelRun& run) {
  const int head_unit = static_cast<int>(config.layers) + 1;
  HZP_CHECK(unit >= 0 && unit <= head_unit, "llama_activation_bytes: unit ", unit, " of ", head_unit + 1);
  Sizes s = sizes_of(config, run);
  if (unit == 0) return embedding(s);
  if (unit == head_unit) return head(s, run.recompute);
  const std::int64_t layer = unit - 1;
  if (config.moe.is_moe_layer(layer)) {
    // The rank's context-parallel share of the tokens; the shared experts' width split over tp, and the routed
    // experts run on the rank's tensor-parallel share of the rows (moe_block.cpp). Under ep the rows a rank's
    // experts receive depend on the routing: this is the single-rank (balanced) figure.
    const std::int64_t tokens = run.micro_batch_size * config.seq_len / run.cp;
    const DType at = activation_dtype(run.precision);
    s.ffn = static_cast<std::uint64_t>(tokens * config.mlp_width(layer) / run.tp) * dtype_size(at);
    s.moe = static_cast<std::uint64_t>(moe_saved_bytes(config.moe, tokens / run.tp, config.hidden, at));
  }
  return block(s, run.recompute);
}

}  // namespace hzp::workloads::llama
