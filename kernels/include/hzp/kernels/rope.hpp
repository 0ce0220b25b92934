// Rotary position embedding (RoPE), forward and backward, CPU launchers, on [tokens, heads, head_dim]
// query/key activations (tokens = batch·seq, flattened; the position of token t is t mod seq_len, or
// positions[t] in the _at form, for token rows that are not whole sequences).
//
// Pairing is "rotate half", as in HF Llama (not the interleaved GPT-J/Meta pairing): element j of a
// head pairs with element j + head_dim/2, for j in [0, head_dim/2), and the pair is rotated by
//   angle = pos · base^(−2j / head_dim)
//   y[j]       = x[j]·cos − x[j + d/2]·sin
//   y[j + d/2] = x[j + d/2]·cos + x[j]·sin
// The backward is the inverse rotation (angle → −angle), since a rotation's Jacobian is itself.
#pragma once

#include <cstdint>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// y = RoPE(x).
/// @param[out] y         [T, H, D], dtype of x; may be the same memory as x (in-place is safe: each
///                       pair is read before it is written)
/// @param[in]  x         [T, H, D] fp64, fp32 or bf16; D even; T a multiple of seq_len
/// @param[in]  seq_len   positions per sequence (> 0): token t sits at position t mod seq_len
/// @param[in]  base      θ, the frequency base (> 0; Llama 2 uses 10000, Llama 3 500000)
/// Angles and their cos/sin are computed in double, then used in fp32 (fp64 for fp64 data), so the
/// result does not depend on how large positions get. CPU: synchronous, deterministic.
void rope_fwd(TensorView y, ConstTensorView x, std::int64_t seq_len, double base, StreamRef s);

/// dx = RoPE⁻¹(dy): the same rotation with the angle negated. Arguments as rope_fwd (dx may be dy).
void rope_bwd(TensorView dx, ConstTensorView dy, std::int64_t seq_len, double base, StreamRef s);

/// y = RoPE(x) with an explicit position per token row: what a context-parallel rank needs, since its
/// rows are two non-contiguous chunks of each sequence (rank r of cp holds chunks r and 2·cp−1−r of
/// 2·cp), so t mod seq_len is not their position. Same rotation, angles and rounding as rope_fwd:
/// rope_fwd_at with positions[t] = t mod seq_len gives rope_fwd's bits.
/// @param[out] y          [T, H, D], dtype of x; may be the same memory as x
/// @param[in]  x          [T, H, D] fp64, fp32 or bf16; D even; T any positive count of token rows
/// @param[in]  positions  int32 [T], each >= 0: the position of token row t in its sequence (document
///                        packing restarts them per document); in the stream's memory
/// @param[in]  base       θ, as rope_fwd
/// CPU: synchronous, deterministic, positions checked. A CUDA stream (rope.cu) does not read device memory on
/// the host: the caller checks the positions before uploading them.
void rope_fwd_at(TensorView y, ConstTensorView x, ConstTensorView positions, double base, StreamRef s);

/// dx = RoPE⁻¹(dy) at explicit positions: the inverse rotation of rope_fwd_at. Arguments as rope_fwd_at
/// (dx may be dy).
void rope_bwd_at(TensorView dx, ConstTensorView dy, ConstTensorView positions, double base, StreamRef s);

}  // namespace hzp::kernels
