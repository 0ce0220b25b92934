// Host launchers for causal grouped-query attention: argument validation (shapes named with their
// dimensions, dtypes, devices, workspace) and dtype dispatch to the tiled CPU path (attention_tiled.hpp,
// checked against the scalar reference in attention_ref.hpp); a CUDA stream goes to the unfused twin in
// attention.cu, whose workspace differs (the overloads taking a Device).
#include "hzp/kernels/attention.hpp"

#include <cstdint>

#include "attention/attention_checks.hpp"
#include "attention/attention_tiled.hpp"
#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {

void AttentionDims::validate(std::string_view kernel) const {
  check_positive(kernel, "batch", batch);
  check_positive(kernel, "seq", seq);
  check_positive(kernel, "heads", heads);
  check_positive(kernel, "kv_heads", kv_heads);
  check_positive(kernel, "head_dim", head_dim);
  if (heads % kv_heads != 0)
    HZP_THROW(PreconditionError, kernel, ": heads = ", heads, " is not a multiple of kv_heads = ", kv_heads,
              " (grouped-query attention shares each kv head among heads / kv_heads query heads)");
}

namespace {

constexpr std::string_view kFwd = "attention_fwd";
constexpr std::string_view kBwd = "attention_bwd";

using namespace attention_checks;

void check_tensor(std::string_view kernel, std::string_view arg, const ConstTensorView& t, const AttentionDims& d,
                  bool kv, DType dtype, StreamRef s) {
  check_activation(kernel, arg, t, kv ? kv_rows(d) : query_rows(d), dtype, s);
}

void check_lse(std::string_view kernel, const ConstTensorView& lse, const AttentionDims& d, DType dtype, StreamRef s) {
  check_row_stats(kernel, "lse", lse, d, acc_dtype(dtype), s);
}

template <typename T>
void run_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
             const AttentionDims& d, std::span<std::byte> ws) {
  using A = acc_t<T>;
  A* work = workspace_as<A>(kFwd, ws, attention_fwd_workspace_bytes(d, dtype_of_v<T>));
  attention_tiled::attention_fwd<T>(out.as<T>(), lse.as<A>(), q.as<T>(), k.as<T>(), v.as<T>(), d, work);
}

template <typename T>
void run_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q, ConstTensorView k,
             ConstTensorView v, ConstTensorView out, ConstTensorView lse, const AttentionDims& d,
             std::span<std::byte> ws) {
  using A = acc_t<T>;
  A* work = workspace_as<A>(kBwd, ws, attention_bwd_workspace_bytes(d, dtype_of_v<T>));
  const AttentionBlock whole{d.batch, d.seq, d.seq, d.heads, d.kv_heads, d.head_dim, 0, 0, true};
  // No Δ given: the tiles compute dout·out per row themselves; every gradient is overwritten.
  attention_tiled::attention_block_bwd<T>(dq.as<T>(), dk.as<T>(), dv.as<T>(), dout.as<T>(), q.as<T>(), k.as<T>(),
                                          v.as<T>(), out.as<T>(), lse.as<A>(), nullptr, whole, {}, work);
}

}  // namespace

std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype) {
  return static_cast<std::size_t>(attention_tiled::fwd_scratch_elems(dims.head_dim)) * acc_size(dtype);
}

std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype) {
  return static_cast<std::size_t>(attention_tiled::bwd_scratch_elems(dims.seq, dims.head_dim)) * acc_size(dtype);
}

std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device) {
  return device.is_cuda() ? cuda::attention_fwd_workspace_bytes(dims, dtype) : attention_fwd_workspace_bytes(dims, dtype);
}

std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device) {
  return device.is_cuda() ? cuda::attention_bwd_workspace_bytes(dims, dtype) : attention_bwd_workspace_bytes(dims, dtype);
}

void attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s) {
  dims.validate(kFwd);
  const DType t = q.dtype();
  check_storage_dtype(kFwd, "q", t);
  check_tensor(kFwd, "q", q, dims, false, t, s);
  check_tensor(kFwd, "k", k, dims, true, t, s);
  check_tensor(kFwd, "v", v, dims, true, t, s);
  check_tensor(kFwd, "out", out, dims, false, t, s);
  check_lse(kFwd, lse, dims, t, s);
  if (s.device().is_cuda()) {
    check_workspace(kFwd, workspace.size(), cuda::attention_fwd_workspace_bytes(dims, t));
    return cuda::attention_fwd(out, lse, q, k, v, dims, workspace, s);
  }
  switch (t) {
    case DType::f64: return run_fwd<double>(out, lse, q, k, v, dims, workspace);
    case DType::f32: return run_fwd<float>(out, lse, q, k, v, dims, workspace);
    default: return run_fwd<bf16>(out, lse, q, k, v, dims, workspace);
  }
}

void attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s) {
  dims.validate(kBwd);
  const DType t = q.dtype();
  check_storage_dtype(kBwd, "q", t);
  check_tensor(kBwd, "q", q, dims, false, t, s);
  check_tensor(kBwd, "k", k, dims, true, t, s);
  check_tensor(kBwd, "v", v, dims, true, t, s);
  check_tensor(kBwd, "out", out, dims, false, t, s);
  check_tensor(kBwd, "dout", dout, dims, false, t, s);
  check_tensor(kBwd, "dq", dq, dims, false, t, s);
  check_tensor(kBwd, "dk", dk, dims, true, t, s);
  check_tensor(kBwd, "dv", dv, dims, true, t, s);
  check_lse(kBwd, lse, dims, t, s);
  if (s.device().is_cuda()) {
    check_workspace(kBwd, workspace.size(), cuda::attention_bwd_workspace_bytes(dims, t));
    return cuda::attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace, s);
  }
  switch (t) {
    case DType::f64: return run_bwd<double>(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace);
    case DType::f32: return run_bwd<float>(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace);
    default: return run_bwd<bf16>(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace);
  }
}

}  // namespace hzp::kernels
