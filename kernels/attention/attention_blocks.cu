// The CUDA twin of the blocked attention (attention_blocks.cpp): one (query block, key block) pair at a time,
// unfused in attention.cu's manner. Per (sequence b, group member j), batched over the KV heads so grouped-query
// heads need no copies: S = QKᵀ/sqrt(D) by cuBLASLt into an fp32 [KV, Tq, Tk] buffer; a kernel per score row
// masks it as the CPU does (attention_blocks_ref.hpp's visible_range: causal by global position when the pair
// asks for it, the document start `first` when given), folds the row into the online-softmax state (new max,
// rescale of acc and row_sum by exp(m − m')) and writes P = exp(S − m') in q's dtype; acc += PV is a GEMM with
// β = 1 into the fp32 accumulator. A row that sees no key of the pair writes P = 0 and leaves its state alone,
// so acc + 0·V keeps it (the CPU keeps it bit for bit; here −0 could become +0, nothing else).
// The backward recomputes S and dP = dO·Vᵀ, forms P = exp(S − lse) and dS = P ⊙ (dP − Δ) inside the visible
// keys (0 elsewhere), then dV += PᵀdO, dK += scale·dSᵀQ (summed over the group's heads in fp32, bf16 rounded once
// per call as the CPU does) and dq = scale·dS·K (+ dq when accumulating: cuBLASLt's β, one rounding).
// bf16 P and dS are what the GEMMs read (the CPU keeps them in fp32): the unfused twin's bf16 tolerances apply.
// Memory: fwd KV·Tq·Tk (fp32 + q's dtype); bwd twice that (+ 2·Tk·KV·D fp32 for bf16); plus cuBLASLt's.
#include <cmath>

#include "attention/attention_gemm_layout.hpp"
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"
#include "hzp/core/cuda_backing.hpp"

namespace hzp::kernels::cuda {
namespace {

/// Which keys of the pair a query row sees: the device side of attention_detail::visible_range.
struct PairMask {
  std::int64_t q_pos0, k_pos0, k_len;
  bool causal;
  const std::int32_t* first;  // this sequence's [Tq] global document starts, or null (plain causal)

  __device__ void range(std::int64_t i, std::int64_t& lo, std::int64_t& hi) const {
    const auto clamp = [&](std::int64_t x) { return x < 0 ? 0 : (x > k_len ? k_len : x); };
    lo = first != nullptr ? clamp(static_cast<std::int64_t>(first[i]) - k_pos0) : 0;
    hi = causal ? clamp(q_pos0 + i - k_pos0 + 1) : k_len;
  }
};

/// Where a (b, j) slice's per-row statistics and accumulator rows are: row i of kv head g.
struct RowStride {
  std::int64_t stat_g;  // between kv heads in [B, H, Tq] statistics: grp·Tq
  std::int64_t acc_i;   // between query rows of the accumulator: H·D
  std::int64_t acc_g;   // between kv heads: grp·D
};

// One block per (query row i, kv head g): fold this pair's visible scores into (acc, m, l), write the row of P.
template <typename T>
__global__ void block_softmax_fwd_kernel(const float* S, T* P, float* row_max, float* row_sum, float* acc,
                                         std::int64_t Tq, std::int64_t D, RowStride st, PairMask mask) {
  const std::int64_t i = blockIdx.x, g = blockIdx.y, Tk = mask.k_len;
  const float* srow = S + (g * Tq + i) * Tk;
  T* prow = P + (g * Tq + i) * Tk;
  std::int64_t lo, hi;
  mask.range(i, lo, hi);
  if (lo >= hi) {  // the same for the whole block: nothing seen, the state stays as it is
    for (std::int64_t s = threadIdx.x; s < Tk; s += blockDim.x) prow[s] = from_f<T>(0.f);
    return;
  }
  float m_blk = -INFINITY;
  for (std::int64_t s = lo + threadIdx.x; s < hi; s += blockDim.x) m_blk = fmaxf(m_blk, srow[s]);
  float* m = row_max + g * st.stat_g + i;
  float* l = row_sum + g * st.stat_g + i;
  const float m_old = *m;
  const float m_new = fmaxf(m_old, block_max(m_blk));
  const float alpha = expf(m_old - m_new);  // 0 for the row's first keys (m_old = −inf), 1 while the max holds
  float sum = 0.f;
  for (std::int64_t s = threadIdx.x; s < Tk; s += blockDim.x) {
    const float p = s >= lo && s < hi ? expf(srow[s] - m_new) : 0.f;
    prow[s] = from_f<T>(p);
    sum += p;
  }
  const float total = block_sum(sum);  // its barriers also end every thread's read of *m
  float* arow = acc + i * st.acc_i + g * st.acc_g;
  for (std::int64_t e = threadIdx.x; e < D; e += blockDim.x) arow[e] *= alpha;
  if (threadIdx.x == 0) {
    *l = *l * alpha + total;
    *m = m_new;
  }
}

// One block per (query row i, kv head g): P = exp(S − lse) and dS = P ⊙ (dP − Δ) on the visible keys, 0 elsewhere.
template <typename T>
__global__ void block_softmax_bwd_kernel(const float* S, const float* dP, T* P, T* dS, const float* lse,
                                         const float* delta, std::int64_t Tq, std::int64_t stat_g, PairMask mask) {
  const std::int64_t i = blockIdx.x, g = blockIdx.y, Tk = mask.k_len;
  const std::int64_t row = (g * Tq + i) * Tk;
  std::int64_t lo, hi;
  mask.range(i, lo, hi);
  const float l = lse[g * stat_g + i], dl = delta[g * stat_g + i];
  for (std::int64_t s = threadIdx.x; s < Tk; s += blockDim.x) {
    float p = 0.f, ds = 0.f;
    if (s >= lo && s < hi) {
      p = expf(S[row + s] - l);
      ds = p * (dP[row + s] - dl);
    }
    P[row + s] = from_f<T>(p);
    dS[row + s] = from_f<T>(ds);
  }
}

__global__ void block_state_init_kernel(float* acc, float* row_max, float* row_sum, std::int64_t n_acc,
                                        std::int64_t n_rows) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n_acc;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    acc[i] = 0.f;
    if (i < n_rows) {
      row_max[i] = -INFINITY;
      row_sum[i] = 0.f;
    }
  }
}

// out = acc / l, lse = m + log l per element of [B, Tq, H, D]; a row that never saw a key: 0 and −inf.
template <typename T>
__global__ void block_finish_kernel(T* out, float* lse, const float* acc, const float* row_max, const float* row_sum,
                                    std::int64_t Tq, std::int64_t H, std::int64_t D, std::int64_t n) {
  for (std::int64_t x = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; x < n;
       x += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = x / D, e = x - row * D;
    const std::int64_t h = row % H, bi = row / H, i = bi % Tq, b = bi / Tq;
    const std::int64_t stat = (b * H + h) * Tq + i;
    const float l = row_sum[stat];
    const bool seen = l > 0.f;
    out[x] = from_f<T>(seen ? acc[x] / l : 0.f);
    if (e == 0) lse[stat] = seen ? row_max[stat] + logf(l) : -INFINITY;
  }
}

PairGeometry geometry(const AttentionBlock& b) {
  return {b.batch, b.q_len, b.k_len, b.heads, b.kv_heads, b.head_dim, b.group()};
}
PairMask mask_of(const AttentionBlock& blk, const std::int32_t* first, std::int64_t b) {
  return {blk.q_pos0, blk.k_pos0, blk.k_len, blk.causal, first != nullptr ? first + b * blk.q_len : nullptr};
}
std::size_t score_bytes(const PairGeometry& g, std::size_t elem) {
  return up(static_cast<std::size_t>(g.KV * g.Tq * g.Tk) * elem);
}

/// Carves 256-byte aligned pieces out of the caller's workspace, in the order the size functions count them.
class Carver {
 public:
  explicit Carver(std::span<std::byte> ws)
      : p_((reinterpret_cast<std::uintptr_t>(ws.data()) + kAlign - 1) / kAlign * kAlign) {}
  template <typename X>
  X* take(std::size_t bytes) {
    auto* x = reinterpret_cast<X*>(p_);
    p_ += bytes;
    return x;
  }
  std::span<std::byte> gemm() { return {take<std::byte>(gemm_workspace_bytes()), gemm_workspace_bytes()}; }

 private:
  std::uintptr_t p_;
};

constexpr int kRowThreads = 128;

}  // namespace

std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock& blk, DType dtype) {
  const PairGeometry g = geometry(blk);
  return score_bytes(g, 4) + score_bytes(g, dtype_size(dtype)) + gemm_workspace_bytes() + kAlign;
}

std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock& blk, DType dtype) {
  const PairGeometry g = geometry(blk);
  const std::size_t acc = dtype == DType::bf16 ? 2 * up(static_cast<std::size_t>(g.Tk * g.KV * g.D) * 4) : 0;
  return 2 * score_bytes(g, 4) + 2 * score_bytes(g, dtype_size(dtype)) + acc + gemm_workspace_bytes() + kAlign;
}

void attention_block_state_init(TensorView acc, TensorView row_max, TensorView row_sum, StreamRef s) {
  constexpr int threads = 256;
  block_state_init_kernel<<<grid_for(acc.numel(), threads, s.device().index), threads, 0, native(s)>>>(
      static_cast<float*>(acc.data()), static_cast<float*>(row_max.data()), static_cast<float*>(row_sum.data()),
      acc.numel(), row_max.numel());
  HZP_CUDA_LAUNCH_CHECK();
}

void attention_block_fwd(TensorView acc, TensorView row_max, TensorView row_sum, ConstTensorView q, ConstTensorView k,
                         ConstTensorView v, const AttentionBlock& blk, std::span<std::byte> workspace, StreamRef s,
                         const std::int32_t* first) {
  if (blk.fully_masked()) return;  // every query precedes every key: the state does not change
  const PairGeometry g = geometry(blk);
  const DType dt = q.dtype();
  Carver carve(workspace);
  auto* S = carve.take<float>(score_bytes(g, 4));
  void* P = carve.take<std::byte>(score_bytes(g, dtype_size(dt)));
  const std::span<std::byte> gemm_ws = carve.gemm();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.D)));
  const int batch = static_cast<int>(g.KV);
  const RowStride st{g.grp * g.Tq, g.H * g.D, g.grp * g.D};
  dispatch_float("attention_block_fwd", dt, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t b = 0; b < g.B; ++b)
      for (std::int64_t j = 0; j < g.grp; ++j) {
        gemm_strided_batched(score_rows(S, DType::f32, g, g.Tk), query_heads(q.data(), dt, g, b, j),
                             kv_heads(k.data(), dt, g, b), false, true, scale, 0.f, batch, gemm_ws, s);
        // Head h = g·grp + j: its statistics start at row (b·H + j)·Tq, its accumulator rows at column j·D.
        const std::int64_t stat0 = (b * g.H + j) * g.Tq;
        float* acc_bj = static_cast<float*>(acc.data()) + b * g.Tq * g.H * g.D + j * g.D;
        block_softmax_fwd_kernel<T><<<dim3(static_cast<unsigned>(g.Tq), static_cast<unsigned>(g.KV)), kRowThreads, 0,
                                      native(s)>>>(S, static_cast<T*>(P), static_cast<float*>(row_max.data()) + stat0,
                                                   static_cast<float*>(row_sum.data()) + stat0, acc_bj, g.Tq, g.D, st,
                                                   mask_of(blk, first, b));
        HZP_CUDA_LAUNCH_CHECK();
        gemm_strided_batched(query_heads(acc.data(), DType::f32, g, b, j), score_rows(P, dt, g, g.Tk),
                             kv_heads(v.data(), dt, g, b), false, false, 1.f, 1.f, batch, gemm_ws, s);
      }
  });
}

void attention_block_finish(TensorView out, TensorView lse, ConstTensorView acc, ConstTensorView row_max,
                            ConstTensorView row_sum, const AttentionDims& d, StreamRef s) {
  dispatch_float("attention_block_finish", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    const std::int64_t n = out.numel();
    block_finish_kernel<T><<<grid_for(n, threads, s.device().index), threads, 0, native(s)>>>(
        static_cast<T*>(out.data()), static_cast<float*>(lse.data()), static_cast<const float*>(acc.data()),
        static_cast<const float*>(row_max.data()), static_cast<const float*>(row_sum.data()), d.seq, d.heads,
        d.head_dim, n);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void attention_block_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, ConstTensorView lse, ConstTensorView delta,
                         const AttentionBlock& blk, AttentionBlockAccumulate accumulate, std::span<std::byte> workspace,
                         StreamRef s, const std::int32_t* first) {
  if (blk.fully_masked()) {  // no work, but the overwrite contract holds: what is not accumulated becomes 0
    if (!accumulate.dq) zero_bytes(dq.data(), dq.bytes(), s);
    if (!accumulate.dkv) {
      zero_bytes(dk.data(), dk.bytes(), s);
      zero_bytes(dv.data(), dv.bytes(), s);
    }
    return;
  }
  const PairGeometry g = geometry(blk);
  const DType dt = q.dtype();
  const bool bf = dt == DType::bf16;
  Carver carve(workspace);
  auto* S = carve.take<float>(score_bytes(g, 4));
  auto* dP = carve.take<float>(score_bytes(g, 4));
  void* P = carve.take<std::byte>(score_bytes(g, dtype_size(dt)));
  void* dS = carve.take<std::byte>(score_bytes(g, dtype_size(dt)));
  const std::size_t acc_bytes = up(static_cast<std::size_t>(g.Tk * g.KV * g.D) * 4);
  float* dk32 = bf ? carve.take<float>(acc_bytes) : nullptr;
  float* dv32 = bf ? carve.take<float>(acc_bytes) : nullptr;
  const std::span<std::byte> gemm_ws = carve.gemm();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.D)));
  const int batch = static_cast<int>(g.KV);
  const std::int64_t n_kv = g.Tk * g.KV * g.D;  // one sequence's dk (or dv)
  const float beta_q = accumulate.dq ? 1.f : 0.f;
  dispatch_float("attention_block_bwd", dt, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t b = 0; b < g.B; ++b) {
      const auto seq_kv = [&](TensorView t) {
        return TensorView(static_cast<std::byte*>(t.data()) + b * n_kv * 2, Shape{n_kv}, DType::bf16, s.device());
      };
      // dK, dV of kv head g sum over the group's query heads: fp32 accumulators for bf16 (loaded from dk/dv when
      // accumulating, so each element is rounded once per call), else dk/dv themselves.
      if (bf && accumulate.dkv) {
        cast(TensorView(dk32, Shape{n_kv}, DType::f32, s.device()), seq_kv(dk), s);
        cast(TensorView(dv32, Shape{n_kv}, DType::f32, s.device()), seq_kv(dv), s);
      }
      const MatrixDesc dk_acc = bf ? kv_heads(dk32, DType::f32, g, 0) : kv_heads(dk.data(), dt, g, b);
      const MatrixDesc dv_acc = bf ? kv_heads(dv32, DType::f32, g, 0) : kv_heads(dv.data(), dt, g, b);
      const MatrixDesc kb = kv_heads(k.data(), dt, g, b), vb = kv_heads(v.data(), dt, g, b);
      for (std::int64_t j = 0; j < g.grp; ++j) {
        const MatrixDesc qj = query_heads(q.data(), dt, g, b, j), doj = query_heads(dout.data(), dt, g, b, j);
        gemm_strided_batched(score_rows(S, DType::f32, g, g.Tk), qj, kb, false, true, scale, 0.f, batch, gemm_ws, s);
        gemm_strided_batched(score_rows(dP, DType::f32, g, g.Tk), doj, vb, false, true, 1.f, 0.f, batch, gemm_ws, s);
        const std::int64_t stat0 = (b * g.H + j) * g.Tq;
        block_softmax_bwd_kernel<T><<<dim3(static_cast<unsigned>(g.Tq), static_cast<unsigned>(g.KV)), kRowThreads, 0,
                                      native(s)>>>(S, dP, static_cast<T*>(P), static_cast<T*>(dS),
                                                   static_cast<const float*>(lse.data()) + stat0,
                                                   static_cast<const float*>(delta.data()) + stat0, g.Tq,
                                                   g.grp * g.Tq, mask_of(blk, first, b));
        HZP_CUDA_LAUNCH_CHECK();
        const float beta_kv = j > 0 || accumulate.dkv ? 1.f : 0.f;
        const MatrixDesc p = score_rows(P, dt, g, g.Tk), ds = score_rows(dS, dt, g, g.Tk);
        gemm_strided_batched(dv_acc, p, doj, true, false, 1.f, beta_kv, batch, gemm_ws, s);
        gemm_strided_batched(dk_acc, ds, qj, true, false, scale, beta_kv, batch, gemm_ws, s);
        gemm_strided_batched(query_heads(dq.data(), dt, g, b, j), ds, kb, false, false, scale, beta_q, batch, gemm_ws,
                             s);
      }
      if (bf) {
        cast(seq_kv(dk), ConstTensorView(dk32, Shape{n_kv}, DType::f32, s.device()), s);
        cast(seq_kv(dv), ConstTensorView(dv32, Shape{n_kv}, DType::f32, s.device()), s);
      }
    }
  });
}

}  // namespace hzp::kernels::cuda
