// Blocked causal grouped-query attention, the form ring attention (context parallelism) needs: one
// (query block, key/value block) pair at a time, combined by an online softmax (running row max and row
// sum, as flash attention), and the matching blocked backward driven by the saved log-sum-exp. Host
// launchers over tensor views; the CPU path tiles each pair into BLAS calls (kernels/attention/attention_tiled.hpp),
// and the scalar reference it is tested against lives in kernels/attention/attention_blocks_ref.hpp; the CUDA twin
// (kernels/attention/attention_blocks.cu) runs a pair unfused, as attention.cu runs a sequence (docs/cuda.md).
//
// One query block's life (the blocks of keys may arrive in any order):
//   forward   attention_block_state_init → attention_block_fwd for each kv block → attention_block_finish
//             (out and lse, the lse exactly as attention_fwd defines it, so attention_bwd can consume it);
//   backward  attention_row_delta (Δ = dout·out per row) → attention_block_bwd for each kv block, adding
//             into dq of the query block and into dk/dv of the kv block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/kernels/attention.hpp"

namespace hzp::kernels {

/// A pair of blocks: q_len query rows at global positions q_pos0 .. q_pos0 + q_len − 1 and k_len keys
/// (and values) at global positions k_pos0 .. k_pos0 + k_len − 1 of the same sequences. With causal, the
/// query at global position p sees the key at position s only when s <= p, so a pair may be fully
/// visible, partly masked or fully masked (q block entirely before the k block); without causal every
/// key is visible. heads, kv_heads and head_dim mean what they mean in AttentionDims.
struct AttentionBlock {
  std::int64_t batch = 0;
  std::int64_t q_len = 0;
  std::int64_t k_len = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t q_pos0 = 0;
  std::int64_t k_pos0 = 0;
  bool causal = true;

  std::int64_t group() const noexcept { return heads / kv_heads; }
  /// The query block's sizes, as attention_block_state_init, _finish and attention_row_delta take them.
  AttentionDims q_dims() const noexcept { return {batch, q_len, heads, kv_heads, head_dim}; }
  /// True when no query of the block sees any key of it (causal and k_pos0 > the last query position).
  bool fully_masked() const noexcept { return causal && k_pos0 > q_pos0 + q_len - 1; }
  /// Throws PreconditionError (naming `kernel` and every value) unless all sizes are positive, heads is
  /// a multiple of kv_heads and both positions are non-negative.
  void validate(std::string_view kernel) const;
};

// Tensor layouts (row-major, contiguous; each activation also accepted as its [tokens, features] view):
//   q, dout, dq, out, acc : [B, Tq, H, D]  or [B*Tq, H*D]
//   k, v, dk, dv          : [B, Tk, KV, D] or [B*Tk, KV*D]
//   row_max, row_sum, lse, delta : [B, H, Tq]
// q, k, v, out, dout and the gradients share one dtype: f64, f32 or bf16. acc, row_max, row_sum, lse and
// delta are in the accumulation dtype: fp64 for f64, fp32 for f32 and bf16.
// Scores are q·k / sqrt(D); query head h reads kv head h / (H / KV).
//
// Stream semantics: on a CPU stream synchronous on the calling thread. A CUDA stream enqueues the twin and
// returns (fp32 and bf16; fp64 is refused by name); its workspace is the device-aware size below, and every
// tensor, `first` included, lives in device memory. Determinism: the tiles are fixed by the positions (64 query
// rows by 64 keys, counted from each block's start) and each tile's sums are one BLAS call, so for one BLAS build
// results are bitwise reproducible and do not depend on the batch size. Blocks combined in another order, or a
// sequence cut into other blocks, agree to rounding, not bitwise. On a GPU the twin rounds P (and dS) to q's dtype
// before its GEMMs, as the unfused attention_fwd twin does: bf16 agrees with the CPU to that kernel's tolerance.
//
// Document masking: `first` ([B, Tq] int32, in the stream's memory; empty = plain causal) gives each query row the
// GLOBAL position of the first key it may see (the start of its document, as in attention_fwd), so the row sees the
// block's keys at global positions [first, its own position]: a range, not a prefix. Entries lie in
// [0, q_pos0 + i] and are non-decreasing along a sequence (checked on the host; a CUDA stream checks the size only,
// the caller checks the values before uploading them). Key tiles wholly before a query tile's documents are
// skipped on the CPU; a kv block wholly before every query's document changes nothing (on the CPU it costs only the
// check; the CUDA twin still runs the pair's GEMMs, with every probability 0).

/// The empty state of a query block: acc = 0, row_max = −inf, row_sum = 0.
/// @param[out] acc [B, Tq, H, D]; row_max, row_sum [B, H, Tq]  (accumulation dtype)
/// @param[in]  dims the query block: seq = Tq (AttentionBlock::q_dims())
void attention_block_state_init(TensorView acc, TensorView row_max, TensorView row_sum, const AttentionDims& dims,
                                StreamRef s);

/// Folds one kv block into the state of the query block (online softmax). Per (b, h, row i) with visible
/// scores s_j of this block: m' = max(m, max_j s_j); acc ← acc·exp(m − m') + Σ_j exp(s_j − m') v_j;
/// l ← l·exp(m − m') + Σ_j exp(s_j − m'); m ← m'. A row that sees no key of this block keeps its
/// state bit for bit (so a fully masked pair changes nothing).
/// @param[in,out] acc [B, Tq, H, D], row_max and row_sum [B, H, Tq], accumulation dtype
/// @param[in]     q [B, Tq, H, D]; k, v [B, Tk, KV, D]
/// @param[in]     workspace at least attention_block_fwd_workspace_bytes(blk, q.dtype(), s.device()) bytes,
///                8-byte aligned
void attention_block_fwd(TensorView acc, TensorView row_max, TensorView row_sum, ConstTensorView q, ConstTensorView k,
                         ConstTensorView v, const AttentionBlock& blk, std::span<std::byte> workspace, StreamRef s,
                         std::span<const std::int32_t> first = {});

/// Bytes of scratch attention_block_fwd needs on the CPU: one score tile and the bf16 widenings of a q, k and v
/// tile (fp32; fp64 for f64), independent of the block lengths.
std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock& blk, DType dtype);
/// The same for a stream on `device`: the CPU size above, or on a CUDA device the twin's [KV, Tq, Tk] scores in
/// fp32 and probabilities in `dtype`, plus cuBLASLt's workspace and 256-byte alignment slack.
std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock& blk, DType dtype, Device device);

/// out = acc / row_sum (rounded once to out's dtype), lse = row_max + log(row_sum): after every kv block
/// of the sequence has been folded in, the lse attention_fwd writes (to rounding). A row with row_sum ==
/// 0 saw no key at all (impossible for whole causal sequences, guarded anyway): out 0, lse −inf.
/// @param[out] out [B, Tq, H, D] (f64, f32 or bf16); lse [B, H, Tq] accumulation dtype of out's dtype
/// @param[in]  acc, row_max, row_sum  the state after the last attention_block_fwd
void attention_block_finish(TensorView out, TensorView lse, ConstTensorView acc, ConstTensorView row_max,
                            ConstTensorView row_sum, const AttentionDims& dims, StreamRef s);

/// delta[b, h, t] = Σ_d dout[b, t, h, d] · out[b, t, h, d], the Δ term of the flash-attention backward,
/// computed once per query block and shared by all its kv blocks.
/// @param[out] delta [B, H, Tq] accumulation dtype; @param[in] dout, out [B, Tq, H, D]
void attention_row_delta(TensorView delta, ConstTensorView dout, ConstTensorView out, const AttentionDims& dims,
                         StreamRef s);

/// Which gradient buffers attention_block_bwd adds into (true) or overwrites (false: zeroed, then
/// added). They are separate because a query block's dq and a kv block's dk/dv see their first
/// contribution from different pairs.
struct AttentionBlockAccumulate {
  bool dq = false;
  bool dkv = false;
};

/// Bytes of scratch attention_block_bwd needs: fp32 (fp64 for f64) accumulators for one kv head's dk and
/// dv block ([Tk, D] each), so every call rounds each gradient element once, and the tiles (P, dS, a dq
/// tile and the bf16 widenings of q, dout, k and v).
std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock& blk, DType dtype);
/// The same for a stream on `device`: on a CUDA device two [KV, Tq, Tk] fp32 buffers (S, dP) and two in `dtype`
/// (P, dS), for bf16 fp32 dk/dv accumulators of one sequence ([Tk, KV, D] each), cuBLASLt's workspace and slack.
std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock& blk, DType dtype, Device device);

/// The pair's contribution to the gradients, from the whole-sequence lse and delta of the query rows:
///   P_ij = exp(s_ij − lse_i) for visible pairs, dS_ij = P_ij (dout_i·v_j − delta_i),
///   dq_i += scale Σ_j dS_ij k_j ; dk_j += scale Σ_i dS_ij q_i ; dv_j += Σ_i P_ij dout_i,
/// with dk/dv of a kv head summing the query heads of its group. Summed over every kv block (for dq)
/// and every query block (for dk, dv) this is attention_bwd. bf16 gradients are rounded once per call,
/// so accumulating over many blocks in bf16 rounds once per block.
/// @param[in,out] dq [B, Tq, H, D]; dk, dv [B, Tk, KV, D], q's dtype (see AttentionBlockAccumulate)
/// @param[in]     dout, q [B, Tq, H, D]; k, v [B, Tk, KV, D]; lse (from attention_block_finish or
///                attention_fwd) and delta (attention_row_delta) [B, H, Tq], accumulation dtype
/// @param[in]     workspace at least attention_block_bwd_workspace_bytes(blk, q.dtype(), s.device()) bytes,
///                8-byte aligned
void attention_block_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, ConstTensorView lse, ConstTensorView delta,
                         const AttentionBlock& blk, AttentionBlockAccumulate accumulate, std::span<std::byte> workspace,
                         StreamRef s, std::span<const std::int32_t> first = {});

}  // namespace hzp::kernels
