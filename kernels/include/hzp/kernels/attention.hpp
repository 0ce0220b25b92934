// Causal self-attention with grouped-query heads and an explicit head dimension: forward (saving the
// per-row log-sum-exp) and backward (recomputing probabilities row by row from it). Host launchers
// over tensor views; the CPU path tiles the work into BLAS calls (kernels/attention/attention_tiled.hpp),
// the scalar reference it is tested against lives in kernels/attention/attention_ref.hpp, the CUDA twin in
// kernels/attention/attention.cu (docs/cuda.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "hzp/core/enum_names.hpp"
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

/// Which kernel runs attention on a CUDA stream. `fused` is cuDNN's fused SDPA (the cuDNN frontend's graph
/// API: bf16, causal, grouped-query heads; never holds a T×T matrix); `unfused` is attention.cu's batched
/// cuBLASLt GEMMs around a softmax kernel, the reference the fused kernel is checked against; `automatic`
/// takes the fused kernel where it can run (bf16 on a GPU, a build with the frontend headers, cuDNN
/// loadable and supporting the shape) and the unfused one otherwise. On a CPU stream the tiled CPU kernel
/// runs whatever is asked, except that `fused` is refused there (there is no cuDNN on the host).
enum class AttentionImpl { automatic, fused, unfused };
/// The model.attention names.
inline constexpr EnumName<AttentionImpl> kAttentionImplNames[] = {
    {"auto", AttentionImpl::automatic}, {"fused", AttentionImpl::fused}, {"unfused", AttentionImpl::unfused}};
std::string_view to_string(AttentionImpl impl) noexcept;
/// A name of kAttentionImplNames; ConfigError naming `key` and the accepted values otherwise.
AttentionImpl attention_impl_from(std::string_view name, std::string_view key);
/// The kernel attention_fwd/bwd run for these arguments: fused or unfused on a CUDA device, unfused (the
/// tiled CPU kernel) on the host; `documents`: a document mask (`first`, below) is given, which only the unfused
/// kernels apply. Throws PreconditionError with the reason when `impl` is fused and the fused kernel cannot run
/// here.
AttentionImpl resolve_attention_impl(AttentionImpl impl, const AttentionDims& dims, DType dtype, Device device,
                                     bool documents = false);
/// Empty when cuDNN's fused attention can run `dims` in `dtype` on the GPU of this process, else why not
/// (wrong dtype, a build without the cuDNN frontend, cuDNN not loadable, the shape not supported). The
/// first call per shape builds cuDNN's graphs (cached per thread).
std::string fused_attention_unavailable(const AttentionDims& dims, DType dtype);

// Tensor layouts (all row-major, contiguous):
//   q, out, dout, dq : [B, T, H, D]  — also accepted as [B*T, H*D], the [tokens, features] a GEMM writes
//   k, v, dk, dv     : [B, T, KV, D] — also accepted as [B*T, KV*D]
//   lse              : [B, H, T]     — the log-sum-exp of each row's scaled scores; fp32 for fp32 and
//                                      bf16 inputs, fp64 for fp64 inputs (the oracle keeps full precision)
// q, k, v, out and the gradients share one dtype: f64, f32 or bf16 (bf16 stored, fp32 computed).
//
// Stream semantics: on a CPU stream the launcher runs synchronously on the calling thread. A CUDA
// stream enqueues the kernel resolve_attention_impl picks: cuDNN's fused SDPA (attention_cudnn.cpp) or the
// unfused twin (attention.cu: batched cuBLASLt GEMMs and a causal softmax kernel).
// Determinism: on the CPU the tiles (64 rows by 64 keys) are fixed by the positions and each tile's sums
// are one BLAS call, so for one BLAS build results are bitwise reproducible whatever the batch size and the
// intra-op thread count (each head is computed whole by one thread), and row t never reads positions > t
// (causality holds bitwise).
//
// Document masking (data.packing = documents, docs/data.md): `first` ([B, T] int32, row-major, in the stream's
// memory: the host's for a CPU stream, the device's for a CUDA one) gives each query row the first key position it
// may see, so row t attends keys first[b, t] .. t (the start of its document); empty means plain causal (first =
// 0). Every entry lies in [0, t] and they are non-decreasing along a sequence; the CPU launcher checks that, a CUDA
// stream cannot read its device memory and leaves the check to the caller (MicroBatchContext::begin checks the host
// copy it uploads). The CPU kernel skips key tiles wholly before a query tile's documents and masks the partial
// ones, so attention's cost follows the documents; with first all zero the results are bitwise those without it.
// On a CUDA stream the unfused twin masks (its GEMMs still cover every key); cuDNN's fused kernel has no document
// mask here, so the automatic choice runs unfused where first is given (resolve_attention_impl's `documents`) and
// an explicit `fused` is refused with the fix.

/// Bytes of scratch attention_fwd needs on the CPU: a score tile, a query tile's output accumulator and
/// running max and sum, and the bf16 widenings of a q, k and v tile (independent of T); once for each range of
/// (sequence, head) pairs the intra-op pool splits the work into (core/intra_op.hpp).
std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype);
/// Bytes of scratch attention_bwd needs on the CPU: fp32 (fp64 for f64) accumulators for one kv head's dk
/// and dv ([T, D] each, so bf16 gradients are rounded once), and the P, dS, dq and widened tiles; once for each
/// range of (sequence, kv head) pairs the intra-op pool splits the work into.
std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype);
/// The same for the kernels that run on `device` with `impl`: the CPU sizes above; on a CUDA device the
/// unfused twin's score buffers (fwd KV·T² fp32, bwd twice that plus row sums and fp32 dK/dV accumulators
/// for bf16) and cuBLASLt's workspace, 256-byte alignment slack included, or the fused kernel's (what
/// cuDNN's plan asks for: no T² term). `documents` as resolve_attention_impl's: pass whether `first` will be given.
std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device,
                                          AttentionImpl impl = AttentionImpl::automatic, bool documents = false);
std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device,
                                          AttentionImpl impl = AttentionImpl::automatic, bool documents = false);

/// out = softmax(q kᵀ / sqrt(D) + causal mask) v, per (batch, head); lse receives each row's log-sum-exp.
/// @param[out] out   [B, T, H, D]
/// @param[out] lse   [B, H, T] (fp32, or fp64 for f64 inputs); needed by attention_bwd
/// @param[in]  q, k, v
/// @param[in]  workspace at least attention_fwd_workspace_bytes(dims, q.dtype(), s.device(), impl, !first.empty()) bytes,
///                       8-byte aligned (256 on a GPU)
/// @param[in]  first     document masking, [B, T] (see above); empty: plain causal
void attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s,
                   AttentionImpl impl = AttentionImpl::automatic, std::span<const std::int32_t> first = {});

/// Gradients of attention_fwd. Probabilities are recomputed from q, k and lse one tile at a time (a
/// T×T matrix is never held); dk and dv of a kv head sum the contributions of every query head of its group.
/// @param[out] dq    [B, T, H, D]   (overwritten)
/// @param[out] dk,dv [B, T, KV, D]  (overwritten)
/// @param[in]  dout  gradient of out; q, k, v, out and lse as given to / written by attention_fwd
/// @param[in]  workspace at least attention_bwd_workspace_bytes(dims, q.dtype(), s.device(), impl, !first.empty()) bytes,
///                       8-byte aligned (256 on a GPU)
/// @param[in]  first the forward's document masking ([B, T]; empty: plain causal)
/// The fused kernel reads lse and out as its own forward wrote them; mixing kernels between a forward and
/// its backward is allowed (both follow the same lse convention: natural log of the scaled scores' sum).
void attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s,
                   AttentionImpl impl = AttentionImpl::automatic, std::span<const std::int32_t> first = {});

}  // namespace hzp::kernels
