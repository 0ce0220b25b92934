// Argument checks shared by the attention launchers (attention.cpp, attention_blocks.cpp): activations in their
// [B, T, N, D] or GEMM [B*T, N*D] form with messages naming the dimensions they come from, per-row statistics
// [B, H, T], the storage and accumulator dtypes, and the workspace reinterpreted as the accumulator type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels::attention_checks {

/// The sizes of one activation's layout, with the names a message gives them.
struct Rows {
  std::int64_t batch, len;
  std::string_view len_name;
  std::int64_t heads;
  std::string_view heads_name;
  std::int64_t head_dim;
};

inline Rows query_rows(const AttentionDims& d, std::string_view len_name = "seq") {
  return {d.batch, d.seq, len_name, d.heads, "heads", d.head_dim};
}
inline Rows kv_rows(const AttentionDims& d) { return {d.batch, d.seq, "seq", d.kv_heads, "kv_heads", d.head_dim}; }

/// fp64 for fp64 storage, fp32 otherwise: the type of accumulators and per-row statistics.
inline DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
inline std::size_t acc_size(DType t) { return t == DType::f64 ? sizeof(double) : sizeof(float); }

inline void check_storage_dtype(std::string_view kernel, std::string_view arg, DType t) {
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has dtype ", dtype_name(t), ", expected fp64, fp32 or bf16");
}

/// Accepts [B, T, N, D] or its GEMM view [B*T, N*D]; the message names both and the dims they come from.
inline void check_activation(std::string_view kernel, std::string_view arg, const ConstTensorView& t, const Rows& r,
                             DType dtype, StreamRef s) {
  const Shape four{r.batch, r.len, r.heads, r.head_dim};
  const Shape two{r.batch * r.len, r.heads * r.head_dim};
  if (!(t.shape() == four || t.shape() == two))
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has shape ", to_string(t.shape()), ", expected ", to_string(four),
              " or ", to_string(two), " (batch=", r.batch, ", ", r.len_name, "=", r.len, ", ", r.heads_name, "=",
              r.heads, ", head_dim=", r.head_dim, ")");
  check_dtype(kernel, arg, t.dtype(), dtype);
  check_device(kernel, arg, t.device(), s);
}

/// A [B, H, T] tensor of per-row statistics (the log-sum-exp, a running max or sum, the backward's delta).
inline void check_row_stats(std::string_view kernel, std::string_view arg, const ConstTensorView& t,
                            const AttentionDims& d, DType dtype, StreamRef s) {
  check_shape(kernel, arg, t.shape(), Shape{d.batch, d.heads, d.seq});
  check_dtype(kernel, arg, t.dtype(), dtype);
  check_device(kernel, arg, t.device(), s);
}

/// Document masking's `first` ([batch, len] int32, row i of a sequence at global position pos0 + i): empty (plain
/// causal), or for every row 0 <= first <= its position, non-decreasing along each sequence (documents follow one
/// another; the tiled kernel relies on it to skip whole key tiles).
inline void check_document_first(std::string_view kernel, std::span<const std::int32_t> first, std::int64_t batch,
                                 std::int64_t len, std::int64_t pos0, StreamRef s) {
  if (first.empty()) return;
  if (static_cast<std::int64_t>(first.size()) != batch * len)
    HZP_THROW(PreconditionError, kernel, ": first holds ", first.size(), " entries, expected batch x rows = ", batch,
              " x ", len, " = ", batch * len, " (one first key position per query row; empty for plain causal)");
  if (s.device().is_cuda()) return;  // device memory: its values were checked on the host before the upload
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < len; ++i) {
      const std::int64_t f = first[static_cast<std::size_t>(b * len + i)];
      const std::int64_t prev = i > 0 ? first[static_cast<std::size_t>(b * len + i - 1)] : 0;
      if (f < prev || f > pos0 + i)
        HZP_THROW(PreconditionError, kernel, ": first[", b, ", ", i, "] = ", f, " (query position ", pos0 + i,
                  ") must lie in [", prev, ", ", pos0 + i,
                  "]: a row's document starts at or before the row and no earlier than the previous row's");
    }
}

/// The workspace is reinterpreted as acc_t<T>; refuse a misaligned span instead of faulting later.
template <typename A>
A* workspace_as(std::string_view kernel, std::span<std::byte> ws, std::size_t needed) {
  check_workspace(kernel, ws.size(), needed);
  if (reinterpret_cast<std::uintptr_t>(ws.data()) % alignof(A) != 0)
    HZP_THROW(PreconditionError, kernel, ": workspace is not ", alignof(A), "-byte aligned");
  return reinterpret_cast<A*>(ws.data());
}

}  // namespace hzp::kernels::attention_checks
