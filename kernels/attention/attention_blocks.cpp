// Host launchers for blocked causal grouped-query attention (attention_blocks.hpp): validation of the
// block pair, shapes (named with the dimensions they come from), dtypes, devices and workspace, then
// dtype dispatch to the tiled CPU path (attention_tiled.hpp; the per-row state kernels, cheap, run the
// reference in attention_blocks_ref.hpp directly). A CUDA stream goes to the twins in attention_blocks.cu
// (attention_row_delta's in attention.cu) after the same checks, fp64 refused there by name.
#include "hzp/kernels/attention_blocks.hpp"

#include <cstdint>
#include <string_view>

#include "attention/attention_blocks_ref.hpp"
#include "attention/attention_checks.hpp"
#include "attention/attention_tiled.hpp"
#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

void AttentionBlock::validate(std::string_view kernel) const {
  q_dims().validate(kernel);  // batch, heads, kv_heads, head_dim and the query block's length
  check_positive(kernel, "k_len", k_len);
  if (q_pos0 < 0 || k_pos0 < 0)
    HZP_THROW(PreconditionError, kernel, ": q_pos0 = ", q_pos0, " and k_pos0 = ", k_pos0,
              " must be non-negative (the global positions of the blocks' first query and first key)");
}

namespace {

constexpr std::string_view kInit = "attention_block_state_init";
constexpr std::string_view kFwd = "attention_block_fwd";
constexpr std::string_view kFinish = "attention_block_finish";
constexpr std::string_view kDelta = "attention_row_delta";
constexpr std::string_view kBwd = "attention_block_bwd";

/// fp64 is the CPU oracle's type: a CUDA stream refuses it before anything is enqueued.
void refuse_fp64_on_cuda(std::string_view kernel, std::string_view arg, DType t, StreamRef s) {
  if (t == DType::f64 && s.device().is_cuda())
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has dtype fp64 and the stream is on ", to_string(s.device()),
              "; the CUDA kernels take fp32 and bf16 (fp64 is the CPU reference's type). Fix: fp32 or bf16 "
              "on a GPU, or a CPU stream for fp64");
}

using namespace attention_checks;

Rows key_rows(const AttentionBlock& b) { return {b.batch, b.k_len, "k_len", b.kv_heads, "kv_heads", b.head_dim}; }

/// The state of a query block: acc [B, Tq, H, D] and row_max / row_sum [B, H, Tq], all in `acc_dt`.
void check_state(std::string_view kernel, const ConstTensorView& acc, const ConstTensorView& row_max,
                 const ConstTensorView& row_sum, const AttentionDims& d, std::string_view len_name, DType acc_dt,
                 StreamRef s) {
  check_activation(kernel, "acc", acc, query_rows(d, len_name), acc_dt, s);
  check_row_stats(kernel, "row_max", row_max, d, acc_dt, s);
  check_row_stats(kernel, "row_sum", row_sum, d, acc_dt, s);
}

}  // namespace

std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock& blk, DType dtype) {
  return static_cast<std::size_t>(attention_tiled::fwd_scratch_elems(blk.head_dim)) * acc_size(dtype);
}

std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock& blk, DType dtype) {
  return static_cast<std::size_t>(attention_tiled::bwd_scratch_elems(blk.k_len, blk.head_dim)) * acc_size(dtype);
}

std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock& blk, DType dtype, Device device) {
  return device.is_cuda() ? cuda::attention_block_fwd_workspace_bytes(blk, dtype)
                          : attention_block_fwd_workspace_bytes(blk, dtype);
}

std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock& blk, DType dtype, Device device) {
  return device.is_cuda() ? cuda::attention_block_bwd_workspace_bytes(blk, dtype)
                          : attention_block_bwd_workspace_bytes(blk, dtype);
}

void attention_block_state_init(TensorView acc, TensorView row_max, TensorView row_sum, const AttentionDims& dims,
                                StreamRef s) {
  dims.validate(kInit);
  const DType a = acc.dtype();
  if (a != DType::f64 && a != DType::f32)
    HZP_THROW(PreconditionError, kInit, ": acc has dtype ", dtype_name(a),
              ", expected fp32 or fp64 (the accumulation dtype)");
  check_state(kInit, acc, row_max, row_sum, dims, "seq", a, s);
  refuse_fp64_on_cuda(kInit, "acc", a, s);
  if (s.device().is_cuda()) return cuda::attention_block_state_init(acc, row_max, row_sum, s);
  if (a == DType::f64)
    return attention_block_state_init_ref(acc.as<double>(), row_max.as<double>(), row_sum.as<double>(), dims);
  attention_block_state_init_ref(acc.as<float>(), row_max.as<float>(), row_sum.as<float>(), dims);
}

void attention_block_fwd(TensorView acc, TensorView row_max, TensorView row_sum, ConstTensorView q, ConstTensorView k,
                         ConstTensorView v, const AttentionBlock& blk, std::span<std::byte> workspace, StreamRef s,
                         std::span<const std::int32_t> first) {
  blk.validate(kFwd);
  const DType t = q.dtype();
  check_storage_dtype(kFwd, "q", t);
  check_activation(kFwd, "q", q, query_rows(blk.q_dims(), "q_len"), t, s);
  check_activation(kFwd, "k", k, key_rows(blk), t, s);
  check_activation(kFwd, "v", v, key_rows(blk), t, s);
  check_state(kFwd, acc, row_max, row_sum, blk.q_dims(), "q_len", acc_dtype(t), s);
  check_document_first(kFwd, first, blk.batch, blk.q_len, blk.q_pos0, s);  // the values on the host only
  const std::int32_t* doc = first.empty() ? nullptr : first.data();
  refuse_fp64_on_cuda(kFwd, "q", t, s);
  if (s.device().is_cuda()) {
    check_workspace(kFwd, workspace.size(), attention_block_fwd_workspace_bytes(blk, t, s.device()));
    return cuda::attention_block_fwd(acc, row_max, row_sum, q, k, v, blk, workspace, s, doc);
  }
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    A* work = workspace_as<A>(kFwd, workspace, attention_block_fwd_workspace_bytes(blk, t));
    attention_tiled::attention_block_fwd<T>(acc.as<A>(), row_max.as<A>(), row_sum.as<A>(), q.as<T>(), k.as<T>(),
                                            v.as<T>(), blk, work, doc);
  });
}

void attention_block_finish(TensorView out, TensorView lse, ConstTensorView acc, ConstTensorView row_max,
                            ConstTensorView row_sum, const AttentionDims& dims, StreamRef s) {
  dims.validate(kFinish);
  const DType t = out.dtype();
  check_storage_dtype(kFinish, "out", t);
  check_activation(kFinish, "out", out, query_rows(dims, "seq"), t, s);
  check_row_stats(kFinish, "lse", lse, dims, acc_dtype(t), s);
  check_state(kFinish, acc, row_max, row_sum, dims, "seq", acc_dtype(t), s);
  refuse_fp64_on_cuda(kFinish, "out", t, s);
  if (s.device().is_cuda()) return cuda::attention_block_finish(out, lse, acc, row_max, row_sum, dims, s);
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    attention_block_finish_ref<T>(out.as<T>(), lse.as<A>(), acc.as<A>(), row_max.as<A>(), row_sum.as<A>(), dims);
  });
}

void attention_row_delta(TensorView delta, ConstTensorView dout, ConstTensorView out, const AttentionDims& dims,
                         StreamRef s) {
  dims.validate(kDelta);
  const DType t = out.dtype();
  check_storage_dtype(kDelta, "out", t);
  check_activation(kDelta, "out", out, query_rows(dims, "seq"), t, s);
  check_activation(kDelta, "dout", dout, query_rows(dims, "seq"), t, s);
  check_row_stats(kDelta, "delta", delta, dims, acc_dtype(t), s);
  refuse_fp64_on_cuda(kDelta, "out", t, s);
  if (s.device().is_cuda()) return cuda::attention_row_delta(delta, dout, out, dims, s);
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    attention_row_delta_ref<T>(delta.as<acc_t<T>>(), dout.as<T>(), out.as<T>(), dims);
  });
}

void attention_block_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, ConstTensorView lse, ConstTensorView delta,
                         const AttentionBlock& blk, AttentionBlockAccumulate accumulate, std::span<std::byte> workspace,
                         StreamRef s, std::span<const std::int32_t> first) {
  blk.validate(kBwd);
  const DType t = q.dtype();
  check_storage_dtype(kBwd, "q", t);
  const Rows qr = query_rows(blk.q_dims(), "q_len"), kr = key_rows(blk);
  check_activation(kBwd, "q", q, qr, t, s);
  check_activation(kBwd, "k", k, kr, t, s);
  check_activation(kBwd, "v", v, kr, t, s);
  check_activation(kBwd, "dout", dout, qr, t, s);
  check_activation(kBwd, "dq", dq, qr, t, s);
  check_activation(kBwd, "dk", dk, kr, t, s);
  check_activation(kBwd, "dv", dv, kr, t, s);
  check_row_stats(kBwd, "lse", lse, blk.q_dims(), acc_dtype(t), s);
  check_row_stats(kBwd, "delta", delta, blk.q_dims(), acc_dtype(t), s);
  check_document_first(kBwd, first, blk.batch, blk.q_len, blk.q_pos0, s);  // the values on the host only
  const std::int32_t* doc = first.empty() ? nullptr : first.data();
  refuse_fp64_on_cuda(kBwd, "q", t, s);
  if (s.device().is_cuda()) {
    check_workspace(kBwd, workspace.size(), attention_block_bwd_workspace_bytes(blk, t, s.device()));
    return cuda::attention_block_bwd(dq, dk, dv, dout, q, k, v, lse, delta, blk, accumulate, workspace, s, doc);
  }
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    A* work = workspace_as<A>(kBwd, workspace, attention_block_bwd_workspace_bytes(blk, t));
    attention_tiled::attention_block_bwd<T>(dq.as<T>(), dk.as<T>(), dv.as<T>(), dout.as<T>(), q.as<T>(), k.as<T>(),
                                            v.as<T>(), nullptr, lse.as<A>(), delta.as<A>(), blk, accumulate, work, 0,
                                            -1, doc);
  });
}

}  // namespace hzp::kernels
