// The CUDA twin of attention_fwd/bwd (attention.cpp): an unfused causal attention, the reference the
// later fused kernel is checked against. Scores go through strided-batched cuBLASLt GEMMs into an fp32
// [KV, T, T] buffer, one (batch, group member j) at a time, batched over the KV heads, so grouped-query
// heads need no copies (head h = g·group + j reads kv head g); a causal softmax kernel turns a score row
// into probabilities in place (bf16 probabilities occupy the first half of their fp32 row) and stores
// the row's log-sum-exp. The backward recomputes S = QKᵀ and P from lse, forms dS = P ⊙ (dP − rowdot(dO,
// O)) in place, and accumulates dK, dV over a group's heads in fp32 (rounded once into bf16).
// Document masking (`first`, device int32 [B, T], null for plain causal): row t keeps keys first[t] .. t and
// gives the others probability 0, exactly as the CPU kernels mask; the full GEMMs still run over every key.
// Memory: fwd KV·T² fp32, bwd 2·KV·T² fp32 + B·T·H fp32 (+ 2·T·KV·D fp32 for bf16), plus cuBLASLt's.
#include <cmath>

#include "attention/attention_gemm_layout.hpp"
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

// Row t of probabilities: P[s] = exp(S[s] − lse) for first[t] ≤ s ≤ t, 0 elsewhere (the full GEMMs read them).
template <typename T>
__global__ void causal_softmax_fwd_kernel(float* S, float* lse, std::int64_t T_, std::int64_t lse_head_stride,
                                          std::int64_t lse_g_stride, const std::int32_t* first) {
  extern __shared__ float row[];
  const std::int64_t t = blockIdx.x, g = blockIdx.y;
  const std::int64_t s0 = first != nullptr ? first[t] : 0;  // the row's document start (0: plain causal)
  float* srow = S + (g * T_ + t) * T_;
  float m = -INFINITY;
  for (std::int64_t s = s0 + threadIdx.x; s <= t; s += blockDim.x) {
    row[s] = srow[s];
    m = fmaxf(m, row[s]);
  }
  const float M = block_max(m);
  float sum = 0.f;
  for (std::int64_t s = s0 + threadIdx.x; s <= t; s += blockDim.x) sum += expf(row[s] - M);
  const float l = M + logf(block_sum(sum));  // block_sum's barriers also end every read of srow
  if (threadIdx.x == 0) lse[g * lse_g_stride + t] = l;
  T* prow = reinterpret_cast<T*>(srow);
  for (std::int64_t s = threadIdx.x; s < T_; s += blockDim.x)
    prow[s] = from_f<T>(s >= s0 && s <= t ? expf(row[s] - l) : 0.f);
  (void)lse_head_stride;
}

// Row t: P = exp(S − lse), dS = P ⊙ (dP − Drow) inside the row's keys first[t] .. t, 0 elsewhere; in place
// over S and dP.
template <typename T>
__global__ void causal_softmax_bwd_kernel(float* S, float* dP, const float* lse, const float* Drow, std::int64_t T_,
                                          std::int64_t lse_g_stride, std::int64_t d_g_stride,
                                          const std::int32_t* first) {
  extern __shared__ float rows[];
  float* s_row = rows;
  float* dp_row = rows + T_;
  const std::int64_t t = blockIdx.x, g = blockIdx.y;
  const std::int64_t s0 = first != nullptr ? first[t] : 0;
  float* srow = S + (g * T_ + t) * T_;
  float* dprow = dP + (g * T_ + t) * T_;
  for (std::int64_t s = s0 + threadIdx.x; s <= t; s += blockDim.x) {
    s_row[s] = srow[s];
    dp_row[s] = dprow[s];
  }
  __syncthreads();
  const float l = lse[g * lse_g_stride + t];
  const float dsum = Drow[g * d_g_stride + t];
  T* prow = reinterpret_cast<T*>(srow);
  T* dsrow = reinterpret_cast<T*>(dprow);
  for (std::int64_t s = threadIdx.x; s < T_; s += blockDim.x) {
    float p = 0.f, ds = 0.f;
    if (s >= s0 && s <= t) {
      p = expf(s_row[s] - l);
      ds = p * (dp_row[s] - dsum);
    }
    prow[s] = from_f<T>(p);
    dsrow[s] = from_f<T>(ds);
  }
}

// Drow[b, h, t] = Σ_d dO[b, t, h, d] · O[b, t, h, d]: one warp per (token, head).
template <typename T>
__global__ void row_dot_kernel(float* D_out, const T* dout, const T* out, std::int64_t B, std::int64_t T_,
                               std::int64_t H, std::int64_t D) {
  const std::int64_t warp = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= B * T_ * H) return;
  const std::int64_t bt = warp / H, h = warp - bt * H, b = bt / T_, t = bt - b * T_;
  float acc = 0.f;
  for (std::int64_t d = lane; d < D; d += 32) acc += to_f(dout[warp * D + d]) * to_f(out[warp * D + d]);
  acc = warp_sum(acc);
  if (lane == 0) D_out[(b * H + h) * T_ + t] = acc;
}

template <typename T>
void launch_row_dot(float* D_out, ConstTensorView dout, ConstTensorView out, const AttentionDims& d, StreamRef s) {
  const std::int64_t rows = d.batch * d.seq * d.heads;
  row_dot_kernel<T><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, native(s)>>>(
      D_out, static_cast<const T*>(dout.data()), static_cast<const T*>(out.data()), d.batch, d.seq, d.heads,
      d.head_dim);
  HZP_CUDA_LAUNCH_CHECK();
}

void set_smem(const void* kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    HZP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// The whole sequence is the pair (queries 0..T−1, keys 0..T−1) of attention_gemm_layout.hpp.
PairGeometry geometry(const AttentionDims& d) {
  return {d.batch, d.seq, d.seq, d.heads, d.kv_heads, d.head_dim, d.group()};
}
MatrixDesc scores(const float* S, const PairGeometry& g) { return score_rows(S, DType::f32, g, g.Tk); }
/// Probabilities (or dS) stored over the score rows: bf16 rows start where their fp32 row starts.
MatrixDesc probs(const float* S, DType t, const PairGeometry& g) {
  return score_rows(S, t, g, g.Tk * (t == DType::bf16 ? 2 : 1));
}

}  // namespace

std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType) {
  const PairGeometry g = geometry(dims);
  return up(static_cast<std::size_t>(g.KV * g.Tq * g.Tq) * 4) + gemm_workspace_bytes() + kAlign;
}

std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype) {
  const PairGeometry g = geometry(dims);
  const std::size_t s = up(static_cast<std::size_t>(g.KV * g.Tq * g.Tq) * 4);
  const std::size_t drow = up(static_cast<std::size_t>(g.B * g.Tq * g.H) * 4);
  const std::size_t acc = dtype == DType::bf16 ? 2 * up(static_cast<std::size_t>(g.Tq * g.KV * g.D) * 4) : 0;
  return 2 * s + drow + acc + gemm_workspace_bytes() + kAlign;
}

void attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s, const std::int32_t* first) {
  const PairGeometry g = geometry(dims);
  const DType dt = q.dtype();
  auto base = (reinterpret_cast<std::uintptr_t>(workspace.data()) + kAlign - 1) / kAlign * kAlign;
  auto* S = reinterpret_cast<float*>(base);
  base += up(static_cast<std::size_t>(g.KV * g.Tq * g.Tq) * 4);
  const std::span<std::byte> gemm_ws(reinterpret_cast<std::byte*>(base), gemm_workspace_bytes());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.D)));
  const int batch = static_cast<int>(g.KV);
  const std::size_t smem = static_cast<std::size_t>(g.Tq) * 4;
  dispatch_float("attention_fwd", dt, [&](auto tag) {
    using T = decltype(tag);
    set_smem(reinterpret_cast<const void*>(&causal_softmax_fwd_kernel<T>), smem);
    for (std::int64_t b = 0; b < g.B; ++b)
      for (std::int64_t j = 0; j < g.grp; ++j) {
        gemm_strided_batched(scores(S, g), query_heads(q.data(), dt, g, b, j), kv_heads(k.data(), dt, g, b), false, true,
                             scale, 0.f, batch, gemm_ws, s);
        // lse[b, h, t] with h = g·grp + j: consecutive g are grp·T apart.
        float* l = static_cast<float*>(lse.data()) + (b * g.H + j) * g.Tq;
        causal_softmax_fwd_kernel<T><<<dim3(static_cast<unsigned>(g.Tq), static_cast<unsigned>(g.KV)), 256, smem,
                                       native(s)>>>(S, l, g.Tq, g.Tq, g.grp * g.Tq,
                                                    first != nullptr ? first + b * g.Tq : nullptr);
        HZP_CUDA_LAUNCH_CHECK();
        MatrixDesc o = query_heads(out.data(), dt, g, b, j);
        gemm_strided_batched(o, probs(S, dt, g), kv_heads(v.data(), dt, g, b), false, false, 1.f, 0.f, batch, gemm_ws,
                             s);
      }
  });
}

void attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s, const std::int32_t* first) {
  const PairGeometry g = geometry(dims);
  const DType dt = q.dtype();
  const bool bf = dt == DType::bf16;
  auto base = (reinterpret_cast<std::uintptr_t>(workspace.data()) + kAlign - 1) / kAlign * kAlign;
  const std::size_t s_bytes = up(static_cast<std::size_t>(g.KV * g.Tq * g.Tq) * 4);
  auto* S = reinterpret_cast<float*>(base);
  auto* dP = reinterpret_cast<float*>(base + s_bytes);
  base += 2 * s_bytes;
  auto* Drow = reinterpret_cast<float*>(base);
  base += up(static_cast<std::size_t>(g.B * g.Tq * g.H) * 4);
  float* dk32 = nullptr;
  float* dv32 = nullptr;
  if (bf) {
    const std::size_t acc = up(static_cast<std::size_t>(g.Tq * g.KV * g.D) * 4);
    dk32 = reinterpret_cast<float*>(base);
    dv32 = reinterpret_cast<float*>(base + acc);
    base += 2 * acc;
  }
  const std::span<std::byte> gemm_ws(reinterpret_cast<std::byte*>(base), gemm_workspace_bytes());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.D)));
  const int batch = static_cast<int>(g.KV);
  const std::size_t smem = static_cast<std::size_t>(g.Tq) * 8;
  dispatch_float("attention_bwd", dt, [&](auto tag) {
    using T = decltype(tag);
    launch_row_dot<T>(Drow, dout, out, dims, s);
    set_smem(reinterpret_cast<const void*>(&causal_softmax_bwd_kernel<T>), smem);
    for (std::int64_t b = 0; b < g.B; ++b) {
      // dK, dV of kv head g sum over the group's query heads: fp32 accumulators for bf16, else in place.
      const MatrixDesc dk_acc = bf ? MatrixDesc{dk32, DType::f32, g.Tq, g.D, g.KV * g.D, g.D}
                                   : kv_heads(dk.data(), dt, g, b);
      const MatrixDesc dv_acc = bf ? MatrixDesc{dv32, DType::f32, g.Tq, g.D, g.KV * g.D, g.D}
                                   : kv_heads(dv.data(), dt, g, b);
      const MatrixDesc kb = kv_heads(k.data(), dt, g, b), vb = kv_heads(v.data(), dt, g, b);
      for (std::int64_t j = 0; j < g.grp; ++j) {
        const MatrixDesc qj = query_heads(q.data(), dt, g, b, j), doj = query_heads(dout.data(), dt, g, b, j);
        gemm_strided_batched(scores(S, g), qj, kb, false, true, scale, 0.f, batch, gemm_ws, s);
        gemm_strided_batched(scores(dP, g), doj, vb, false, true, 1.f, 0.f, batch, gemm_ws, s);
        const float* l = static_cast<const float*>(lse.data()) + (b * g.H + j) * g.Tq;
        const float* drow = Drow + (b * g.H + j) * g.Tq;
        causal_softmax_bwd_kernel<T><<<dim3(static_cast<unsigned>(g.Tq), static_cast<unsigned>(g.KV)), 256, smem,
                                       native(s)>>>(S, dP, l, drow, g.Tq, g.grp * g.Tq, g.grp * g.Tq,
                                                    first != nullptr ? first + b * g.Tq : nullptr);
        HZP_CUDA_LAUNCH_CHECK();
        const float beta = j > 0 ? 1.f : 0.f;
        gemm_strided_batched(dv_acc, probs(S, dt, g), doj, true, false, 1.f, beta, batch, gemm_ws, s);
        gemm_strided_batched(dk_acc, probs(dP, dt, g), qj, true, false, scale, beta, batch, gemm_ws, s);
        gemm_strided_batched(query_heads(dq.data(), dt, g, b, j), probs(dP, dt, g), kb, false, false, scale, 0.f, batch,
                             gemm_ws, s);
      }
      if (bf) {
        const std::int64_t n = g.Tq * g.KV * g.D;
        const std::int64_t off = b * n * 2;  // bytes of bf16
        cast(TensorView(static_cast<std::byte*>(dk.data()) + off, Shape{n}, DType::bf16, s.device()),
             ConstTensorView(dk32, Shape{n}, DType::f32, s.device()), s);
        cast(TensorView(static_cast<std::byte*>(dv.data()) + off, Shape{n}, DType::bf16, s.device()),
             ConstTensorView(dv32, Shape{n}, DType::f32, s.device()), s);
      }
    }
  });
}

// The blocked backward's Δ (attention_blocks.hpp) is the same row dot the whole-sequence backward takes.
void attention_row_delta(TensorView delta, ConstTensorView dout, ConstTensorView out, const AttentionDims& dims,
                         StreamRef s) {
  dispatch_float("attention_row_delta", out.dtype(), [&](auto tag) {
    launch_row_dot<decltype(tag)>(static_cast<float*>(delta.data()), dout, out, dims, s);
  });
}

}  // namespace hzp::kernels::cuda
