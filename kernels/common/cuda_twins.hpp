// The CUDA twins of the kernel launchers (private to hzp_kernels). Each public launcher validates its
// arguments once (shapes, dtypes, devices) and, for a CUDA stream, calls its twin here; the twins live
// beside their CPU references (kernels/<family>/<family>.cu) and may assume validated arguments.
// Every twin enqueues on `s` and returns without waiting, except where its comment says it blocks.
// A build without CUDA links common/cuda_twins_absent.cpp instead, where each twin throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/cross_entropy.hpp"

namespace hzp::kernels::cuda {

/// True when this build has the CUDA twins.
bool built() noexcept;

// gemm.cu: cuBLASLt.
/// cuBLASLt's workspace for any GEMM here (32 MiB, what NVIDIA recommends for Hopper).
std::size_t gemm_workspace_bytes() noexcept;
void gemm(TensorView c, ConstTensorView a, ConstTensorView b, bool trans_a, bool trans_b, float alpha, float beta,
          std::span<std::byte> workspace, StreamRef s);

/// One stored row-major matrix of a strided batch: `rows` x `cols` with leading dimension `ld` (elements
/// between rows) and `batch_stride` elements between consecutive matrices.
struct MatrixDesc {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
};
/// C_i = alpha·op(A_i)·op(B_i) + beta·C_i for i < batch (fp32 accumulation; dtypes as gemm allows).
void gemm_strided_batched(const MatrixDesc& c, const MatrixDesc& a, const MatrixDesc& b, bool trans_a, bool trans_b,
                          float alpha, float beta, int batch, std::span<std::byte> workspace, StreamRef s);

// embedding.cu
void embedding_fwd(TensorView out, ConstTensorView tokens, ConstTensorView table, StreamRef s);
void embedding_bwd(TensorView dtable, ConstTensorView tokens, ConstTensorView dout, bool accumulate, StreamRef s);

// rmsnorm.cu
void rmsnorm_fwd(TensorView y, TensorView rstd, ConstTensorView x, ConstTensorView w, float eps, StreamRef s);
void rmsnorm_bwd(TensorView dx, TensorView dw, ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                 ConstTensorView rstd, bool accumulate, StreamRef s);

// rope.cu: inverse = true rotates by −angle (the backward).
void rope(TensorView y, ConstTensorView x, std::int64_t seq_len, double base, bool inverse, StreamRef s);
// rope.cu: at explicit positions (int32 [tokens] in device memory, checked non-negative by the caller).
void rope_at(TensorView y, ConstTensorView x, ConstTensorView positions, double base, bool inverse, StreamRef s);

// swiglu.cu
void swiglu_fwd(TensorView out, ConstTensorView gate, ConstTensorView up, StreamRef s);
void swiglu_bwd(TensorView dgate, TensorView dup, ConstTensorView dout, ConstTensorView gate, ConstTensorView up,
                StreamRef s);

// cast.cu
void cast(TensorView out, ConstTensorView in, StreamRef s);

// cross_entropy.cu. losses or dlogits may be null (forward only, backward only). Blocks the host when
// losses is given (the loss sum is returned by value: one stream synchronisation).
CrossEntropyResult cross_entropy(TensorView* losses, TensorView* dlogits, ConstTensorView logits,
                                 ConstTensorView targets, std::int32_t ignore_index, const CrossEntropyGrad* grad,
                                 StreamRef s);
/// Blocks the host (copies the targets back).
std::int64_t cross_entropy_count_valid(ConstTensorView targets, std::int32_t ignore_index, StreamRef s);

// adamw.cu: params_bf16 may be null.
void adamw_step(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
                void* params_bf16, StreamRef s);

// grad_norm.cu. Blocks the host (the sum is returned by value).
double grad_norm_sum_squares(std::span<const ConstTensorView> grads, StreamRef s);
void grad_scale_inplace(TensorView x, double scale, StreamRef s);

// attention.cu: unfused (batched cuBLASLt GEMMs and a causal softmax kernel); `first` is the document mask in
// device memory ([B, T] int32) or null.
std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype);
std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype);
void attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s, const std::int32_t* first);
void attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s, const std::int32_t* first);

// attention.cu: Δ = rowdot(dout, out) per query row, [B, H, T] fp32 (the blocked backward's attention_row_delta).
void attention_row_delta(TensorView delta, ConstTensorView dout, ConstTensorView out, const AttentionDims& dims,
                         StreamRef s);

// attention_blocks.cu: one (query block, key block) pair of the blocked attention (attention_blocks.hpp), unfused as
// attention.cu is (cuBLASLt over the KV heads around a masking softmax kernel); `first` is the document mask in
// device memory ([B, Tq] int32, global positions) or null. Workspace 256-byte aligned inside (the sizes include
// the slack).
std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock& blk, DType dtype);
std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock& blk, DType dtype);
void attention_block_state_init(TensorView acc, TensorView row_max, TensorView row_sum, StreamRef s);
void attention_block_fwd(TensorView acc, TensorView row_max, TensorView row_sum, ConstTensorView q, ConstTensorView k,
                         ConstTensorView v, const AttentionBlock& blk, std::span<std::byte> workspace, StreamRef s,
                         const std::int32_t* first);
void attention_block_finish(TensorView out, TensorView lse, ConstTensorView acc, ConstTensorView row_max,
                            ConstTensorView row_sum, const AttentionDims& dims, StreamRef s);
void attention_block_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, ConstTensorView lse, ConstTensorView delta,
                         const AttentionBlock& blk, AttentionBlockAccumulate accumulate, std::span<std::byte> workspace,
                         StreamRef s, const std::int32_t* first);

// attention_cudnn.cpp: cuDNN's fused SDPA through the cuDNN frontend's graph API, bf16 only; builds without
// CUDA or without the frontend headers link attention_cudnn_absent.cpp. fused_attention_unavailable is
// empty when the kernel runs `dims` here, else the reason; the others require that it is empty.
std::string fused_attention_unavailable(const AttentionDims& dims, DType dtype);
std::size_t fused_attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype);
std::size_t fused_attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype);
void fused_attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                         const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s);
void fused_attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                         const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s);

// add.cu: out = a + b (the residual add), fp32 or bf16, computed in fp32, rounded once.
void add(TensorView out, ConstTensorView a, ConstTensorView b, StreamRef s);

// vocab_parallel.cu: one tensor-parallel rank's slice [vocab_begin, vocab_begin + Vl) of the vocabulary.
void embedding_fwd_vocab_range(TensorView out, ConstTensorView tokens, ConstTensorView table_rows,
                               std::int64_t vocab_begin, StreamRef s);
void embedding_bwd_vocab_range(TensorView dtable_rows, ConstTensorView tokens, ConstTensorView dout,
                               std::int64_t vocab_begin, bool accumulate, StreamRef s);
void vocab_parallel_ce_local_stats(TensorView row_max, TensorView target_logit, ConstTensorView logits,
                                   ConstTensorView targets, std::int64_t vocab_begin, std::int32_t ignore_index,
                                   StreamRef s);
void vocab_parallel_ce_sum_exp(TensorView sum_exp, ConstTensorView logits, ConstTensorView global_max, StreamRef s);
/// Blocks the host (copies the losses back: the loss sum is returned by value).
CrossEntropyResult vocab_parallel_ce_loss(TensorView losses, ConstTensorView global_max,
                                          ConstTensorView global_sum_exp, ConstTensorView global_target_logit,
                                          ConstTensorView targets, std::int32_t ignore_index, StreamRef s);
void vocab_parallel_ce_bwd(TensorView dlogits, ConstTensorView logits, ConstTensorView targets,
                           std::int64_t vocab_begin, ConstTensorView global_max, ConstTensorView global_sum_exp,
                           const CrossEntropyGrad& grad, StreamRef s);

}  // namespace hzp::kernels::cuda
