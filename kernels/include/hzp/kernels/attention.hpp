// Causal self-attention with grouped-query heads and an explicit head dimension: forward (saving the
// per-row log-sum-exp) and backward (recomputing probabilities row by row from it). Host launchers
// over tensor views; the CPU path tiles the work into BLAS calls (kernels/attention/attention_tiled.hpp),
// the scalar reference it is tested against lives in kernels/attention/attention_ref.hpp, the CUDA twin in
// kernels/attention/attention.cu (docs/cuda.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// The problem size. Query head h reads key/value head h / (heads / kv_heads) (grouped-query
/// attention; kv_heads == heads is plain multi-head attention, kv_heads == 1 multi-query).
/// head_dim is explicit: it need not equal hidden / heads. Scores are scaled by 1/sqrt(head_dim).
struct AttentionDims {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;

  std::int64_t group() const noexcept { return heads / kv_heads; }
  /// Throws PreconditionError (naming `kernel` and every value) unless all sizes are positive and
  /// heads is a multiple of kv_heads.
  void validate(std::string_view kernel) const;
};

// Tensor layouts (all row-major, contiguous):
//   q, out, dout, dq : [B, T, H, D]  — also accepted as [B*T, H*D], the [tokens, features] a GEMM writes
//   k, v, dk, dv     : [B, T, KV, D] — also accepted as [B*T, KV*D]
//   lse              : [B, H, T]     — the log-sum-exp of each row's scaled scores; fp32 for fp32 and
//                                      bf16 inputs, fp64 for fp64 inputs (the oracle keeps full precision)
// q, k, v, out and the gradients share one dtype: f64, f32 or bf16 (bf16 stored, fp32 computed).
//
// Stream semantics: on a CPU stream the launcher runs synchronously on the calling thread. A CUDA
// stream enqueues the unfused twin (attention.cu: batched cuBLASLt GEMMs and a causal softmax kernel).
// Determinism: on the CPU the tiles (64 rows by 64 keys) are fixed by the positions and each tile's sums
// are one BLAS call, so for one BLAS build results are bitwise reproducible whatever the batch size, and
// row t never reads positions > t (causality holds bitwise).

/// Bytes of scratch attention_fwd needs on the CPU: a score tile, a query tile's output accumulator and
/// running max and sum, and the bf16 widenings of a q, k and v tile (independent of T).
std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype);
/// Bytes of scratch attention_bwd needs on the CPU: fp32 (fp64 for f64) accumulators for one kv head's dk
/// and dv ([T, D] each, so bf16 gradients are rounded once), and the P, dS, dq and widened tiles.
std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype);
/// The same for the kernels that run on `device`: the CPU sizes above, or on a CUDA device the unfused
/// twin's score buffers (fwd KV·T² fp32, bwd twice that plus row sums and fp32 dK/dV accumulators for
/// bf16) and cuBLASLt's workspace, 256-byte alignment slack included.
std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device);
std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device);

/// out = softmax(q kᵀ / sqrt(D) + causal mask) v, per (batch, head); lse receives each row's log-sum-exp.
/// @param[out] out   [B, T, H, D]
/// @param[out] lse   [B, H, T] (fp32, or fp64 for f64 inputs); needed by attention_bwd
/// @param[in]  q, k, v
/// @param[in]  workspace at least attention_fwd_workspace_bytes(dims, q.dtype()) bytes, 8-byte aligned
void attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s);

/// Gradients of attention_fwd. Probabilities are recomputed from q, k and lse one tile at a time (a
/// T×T matrix is never held); dk and dv of a kv head sum the contributions of every query head of its group.
/// @param[out] dq    [B, T, H, D]   (overwritten)
/// @param[out] dk,dv [B, T, KV, D]  (overwritten)
/// @param[in]  dout  gradient of out; q, k, v, out and lse as given to / written by attention_fwd
/// @param[in]  workspace at least attention_bwd_workspace_bytes(dims, q.dtype()) bytes, 8-byte aligned
void attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s);

}  // namespace hzp::kernels
