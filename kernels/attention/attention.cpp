// Host launchers for causal grouped-query attention: argument validation (shapes named with their
// dimensions, dtypes, devices, workspace) and dtype dispatch to the tiled CPU path (attention_tiled.hpp,
// checked against the scalar reference in attention_ref.hpp); a CUDA stream goes to cuDNN's fused kernel
// (attention_cudnn.cpp) or the unfused twin in attention.cu, as resolve_attention_impl decides, each with
// its own workspace (the overloads taking a Device).
#include "hzp/kernels/attention.hpp"

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>

#include "attention/attention_checks.hpp"
#include "attention/attention_tiled.hpp"
#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/intra_op.hpp"
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

// Both launchers' first checks, in this order: the dims, q's storage dtype, then q, k, v and out in it. Returns
// q's dtype, the one every tensor of the call is held in.
DType check_forward_tensors(std::string_view kernel, const ConstTensorView& q, const ConstTensorView& k,
                            const ConstTensorView& v, const ConstTensorView& out, const AttentionDims& dims,
                            StreamRef s) {
  dims.validate(kernel);
  const DType t = q.dtype();
  check_storage_dtype(kernel, "q", t);
  check_tensor(kernel, "q", q, dims, false, t, s);
  check_tensor(kernel, "k", k, dims, true, t, s);
  check_tensor(kernel, "v", v, dims, true, t, s);
  check_tensor(kernel, "out", out, dims, false, t, s);
  return t;
}

// Both launchers' last checks and their choice of kernel: the lse, the document starts (their size here, the
// values on the host only), and the implementation a CUDA stream runs.
struct Resolved {
  const std::int32_t* doc;  // null without document masking
  AttentionImpl run;
};
Resolved check_lse_and_resolve(std::string_view kernel, const ConstTensorView& lse, std::span<const std::int32_t> first,
                               const AttentionDims& dims, DType t, StreamRef s, AttentionImpl impl) {
  check_lse(kernel, lse, dims, t, s);
  check_document_first(kernel, first, dims.batch, dims.seq, 0, s);
  const std::int32_t* doc = first.empty() ? nullptr : first.data();
  return {doc, resolve_attention_impl(impl, dims, t, s.device(), doc != nullptr)};
}

// The CPU kernels split their (sequence, head) items over the intra-op pool; each range folds its tiles in its
// own slice of the workspace, which is sized for as many ranges as the pool would use.
std::int64_t fwd_items(const AttentionDims& d) { return d.batch * d.heads; }
std::int64_t bwd_items(const AttentionDims& d) { return d.batch * d.kv_heads; }

template <typename T>
void run_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
             const AttentionDims& d, std::span<std::byte> ws, const std::int32_t* doc) {
  using A = acc_t<T>;
  A* work = workspace_as<A>(kFwd, ws, attention_fwd_workspace_bytes(d, dtype_of_v<T>));
  const std::int64_t per_range = attention_tiled::fwd_scratch_elems(d.head_dim);
  core::parallel_for_ranges(fwd_items(d), 1, [&](int r, std::int64_t first, std::int64_t last) {
    attention_tiled::attention_fwd<T>(out.as<T>(), lse.as<A>(), q.as<T>(), k.as<T>(), v.as<T>(), d,
                                      work + r * per_range, first, last, doc);
  });
}

template <typename T>
void run_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q, ConstTensorView k,
             ConstTensorView v, ConstTensorView out, ConstTensorView lse, const AttentionDims& d,
             std::span<std::byte> ws, const std::int32_t* doc) {
  using A = acc_t<T>;
  A* work = workspace_as<A>(kBwd, ws, attention_bwd_workspace_bytes(d, dtype_of_v<T>));
  const AttentionBlock whole{d.batch, d.seq, d.seq, d.heads, d.kv_heads, d.head_dim, 0, 0, true};
  const std::int64_t per_range = attention_tiled::bwd_scratch_elems(d.seq, d.head_dim);
  core::parallel_for_ranges(bwd_items(d), 1, [&](int r, std::int64_t first, std::int64_t last) {
    attention_tiled::attention_block_bwd<T>(dq.as<T>(), dk.as<T>(), dv.as<T>(), dout.as<T>(), q.as<T>(), k.as<T>(),
                                            v.as<T>(), out.as<T>(), lse.as<A>(), nullptr, whole, {},
                                            work + r * per_range, first, last, doc);
  });
}

void note_fallback(const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string> said;
  const std::lock_guard lock(mu);
  if (said.insert(reason).second)
    std::fprintf(stderr, "hzpbench: attention runs the unfused CUDA kernels: %s\n", reason.c_str());
}

}  // namespace

std::string_view to_string(AttentionImpl impl) noexcept { return name_of(kAttentionImplNames, impl); }

AttentionImpl attention_impl_from(std::string_view name, std::string_view key) {
  if (const auto impl = value_of(kAttentionImplNames, name)) return *impl;
  HZP_THROW(ConfigError, key, " = \"", name, "\" is not an attention kernel. Fix: one of ",
            names_text(kAttentionImplNames));
}

std::string fused_attention_unavailable(const AttentionDims& dims, DType dtype) {
  dims.validate("fused attention");
  return cuda::fused_attention_unavailable(dims, dtype);
}

AttentionImpl resolve_attention_impl(AttentionImpl impl, const AttentionDims& dims, DType dtype, Device device,
                                     bool documents) {
  if (!device.is_cuda()) {
    if (impl == AttentionImpl::fused)
      HZP_THROW(PreconditionError, "attention: the fused kernel is cuDNN's and runs on a CUDA device; this stream is "
                "on the host. Fix: model.attention = auto or unfused (the host always runs the tiled CPU kernel)");
    return AttentionImpl::unfused;
  }
  if (impl == AttentionImpl::unfused) return impl;
  // Packed documents: the graph built in attention_cudnn.cpp is plain causal. (cuDNN can mask documents through
  // ragged sequences, one per document; that path is not built.) Expected, so no fallback message.
  if (documents) {
    if (impl == AttentionImpl::fused)
      HZP_THROW(PreconditionError, "attention: model.attention = fused, but cuDNN's fused kernel here has no "
                "document mask (data.packing = documents). Fix: model.attention = auto or unfused, or data.packing = none");
    return AttentionImpl::unfused;
  }
  const std::string why = fused_attention_unavailable(dims, dtype);
  if (why.empty()) return AttentionImpl::fused;
  if (impl == AttentionImpl::fused)
    HZP_THROW(PreconditionError, "attention: model.attention = fused, but ", why);
  if (dtype == DType::bf16) note_fallback(why);  // fp32 and fp64 are expected to run unfused: no message
  return AttentionImpl::unfused;
}

std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype) {
  return static_cast<std::size_t>(attention_tiled::fwd_scratch_elems(dims.head_dim) *
                                  core::intra_op_ranges(fwd_items(dims), 1)) *
         acc_size(dtype);
}

std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype) {
  return static_cast<std::size_t>(attention_tiled::bwd_scratch_elems(dims.seq, dims.head_dim) *
                                  core::intra_op_ranges(bwd_items(dims), 1)) *
         acc_size(dtype);
}

std::size_t attention_fwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device, AttentionImpl impl,
                                          bool documents) {
  if (!device.is_cuda()) return attention_fwd_workspace_bytes(dims, dtype);
  return resolve_attention_impl(impl, dims, dtype, device, documents) == AttentionImpl::fused
             ? cuda::fused_attention_fwd_workspace_bytes(dims, dtype)
             : cuda::attention_fwd_workspace_bytes(dims, dtype);
}

std::size_t attention_bwd_workspace_bytes(const AttentionDims& dims, DType dtype, Device device, AttentionImpl impl,
                                          bool documents) {
  if (!device.is_cuda()) return attention_bwd_workspace_bytes(dims, dtype);
  return resolve_attention_impl(impl, dims, dtype, device, documents) == AttentionImpl::fused
             ? cuda::fused_attention_bwd_workspace_bytes(dims, dtype)
             : cuda::attention_bwd_workspace_bytes(dims, dtype);
}

void attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s, AttentionImpl impl,
                   std::span<const std::int32_t> first) {
  const DType t = check_forward_tensors(kFwd, q, k, v, out, dims, s);
  const auto [doc, run] = check_lse_and_resolve(kFwd, lse, first, dims, t, s, impl);
  if (s.device().is_cuda()) {
    check_workspace(kFwd, workspace.size(), attention_fwd_workspace_bytes(dims, t, s.device(), run));
    if (run == AttentionImpl::fused) return cuda::fused_attention_fwd(out, lse, q, k, v, dims, workspace, s);
    return cuda::attention_fwd(out, lse, q, k, v, dims, workspace, s, doc);
  }
  switch (t) {
    case DType::f64: return run_fwd<double>(out, lse, q, k, v, dims, workspace, doc);
    case DType::f32: return run_fwd<float>(out, lse, q, k, v, dims, workspace, doc);
    default: return run_fwd<bf16>(out, lse, q, k, v, dims, workspace, doc);
  }
}

void attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                   const AttentionDims& dims, std::span<std::byte> workspace, StreamRef s, AttentionImpl impl,
                   std::span<const std::int32_t> first) {
  const DType t = check_forward_tensors(kBwd, q, k, v, out, dims, s);
  check_tensor(kBwd, "dout", dout, dims, false, t, s);
  check_tensor(kBwd, "dq", dq, dims, false, t, s);
  check_tensor(kBwd, "dk", dk, dims, true, t, s);
  check_tensor(kBwd, "dv", dv, dims, true, t, s);
  const auto [doc, run] = check_lse_and_resolve(kBwd, lse, first, dims, t, s, impl);
  if (s.device().is_cuda()) {
    check_workspace(kBwd, workspace.size(), attention_bwd_workspace_bytes(dims, t, s.device(), run));
    if (run == AttentionImpl::fused)
      return cuda::fused_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace, s);
    return cuda::attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace, s, doc);
  }
  switch (t) {
    case DType::f64: return run_bwd<double>(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace, doc);
    case DType::f32: return run_bwd<float>(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace, doc);
    default: return run_bwd<bf16>(dq, dk, dv, dout, q, k, v, out, lse, dims, workspace, doc);
  }
}

}  // namespace hzp::kernels
