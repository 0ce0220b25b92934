// RoPE launchers on the CPU: validate [tokens, heads, head_dim] views (head_dim even, base > 0, and
// either tokens a multiple of seq_len or an int32 position per token row), then dispatch on dtype: the seq_len
// form rotates through a cached table of its angles (rope_table.hpp, the reference's bits) with token rows split
// over the intra-op pool, the positions form through rope_ref.hpp (a CUDA stream: rope.cu, both forms).
#include "hzp/kernels/rope.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>

#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "common/cpu_parallel.hpp"
#include "common/cuda_twins.hpp"
#include "rope/rope_ref.hpp"
#include "rope/rope_table.hpp"

namespace hzp::kernels {
namespace {

struct RopeRows {
  std::int64_t tokens, heads, head_dim;
};

/// The checks both position forms share: x's layout, head_dim even, base, and y against x.
RopeRows check_rows(std::string_view k, const TensorView& y, const ConstTensorView& x, double base, StreamRef s) {
  const Shape& sh = x.shape();
  if (sh.ndim != 3)
    HZP_THROW(PreconditionError, k, ": input must be 3-D [tokens, heads, head_dim], got shape ", to_string(sh));
  const RopeRows r{sh[0], sh[1], sh[2]};
  check_positive(k, "tokens", r.tokens);
  check_positive(k, "heads", r.heads);
  check_positive(k, "head_dim", r.head_dim);
  if (r.head_dim % 2 != 0)
    HZP_THROW(PreconditionError, k, ": head_dim = ", r.head_dim, " must be even (rotate-half pairs j with j + ",
              "head_dim/2)");
  if (!(base > 0.0)) HZP_THROW(PreconditionError, k, ": base = ", base, " must be > 0");
  check_shape(k, "output", y.shape(), sh);
  check_dtype(k, "output", y.dtype(), x.dtype());
  check_device(k, "output", y.device(), s);
  check_device(k, "input", x.device(), s);
  return r;
}

/// Runs `rotate(tag)` with tag a value of x's storage type, or names the dtype it cannot take.
template <typename Fn>
void dispatch_rope(std::string_view k, DType t, Fn&& rotate) {
  switch (t) {
    case DType::f64: return rotate(double{});
    case DType::f32: return rotate(float{});
    case DType::bf16: return rotate(bf16{});
    default: HZP_THROW(PreconditionError, k, ": input has dtype ", dtype_name(t), "; expected fp64, fp32 or bf16");
  }
}

/// The table of (seq_len, head_dim, base) in compute type A, built on first use and kept for the process (small:
/// 256 positions × 32 pairs × 2 × 4 bytes = 64 KiB). Tables are never freed or changed once built, so a reference
/// stays valid; the lock covers only the lookup.
template <typename A>
const RopeTable<A>& rope_table(std::int64_t seq_len, std::int64_t head_dim, double base) {
  static std::mutex mu;
  static std::map<std::tuple<std::int64_t, std::int64_t, double>, std::unique_ptr<const RopeTable<A>>> tables;
  std::lock_guard lock(mu);
  auto& t = tables[{seq_len, head_dim, base}];
  if (!t) t = std::make_unique<const RopeTable<A>>(make_rope_table<A>(seq_len, head_dim, base));
  return *t;
}

void rope_launch(std::string_view k, TensorView y, ConstTensorView x, std::int64_t seq_len, double base,
                 bool inverse, StreamRef s) {
  const RopeRows r = check_rows(k, y, x, base, s);
  check_positive(k, "seq_len", seq_len);
  if (r.tokens % seq_len != 0)
    HZP_THROW(PreconditionError, k, ": tokens = ", r.tokens, " is not a multiple of seq_len = ", seq_len,
              " (tokens = batch·seq_len)");
  if (s.device().is_cuda()) return cuda::rope(y, x, seq_len, base, inverse, s);
  dispatch_rope(k, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto& tab = rope_table<acc_t<T>>(seq_len, r.head_dim, base);
    for_row_ranges(r.tokens, r.heads * r.head_dim, [&](std::int64_t t0, std::int64_t t1) {
      rope_rotate_table(y.as<T>(), x.as<T>(), t0, t1, r.heads, r.head_dim, tab, inverse);
    });
  });
}

void rope_at_launch(std::string_view k, TensorView y, ConstTensorView x, ConstTensorView positions, double base,
                    bool inverse, StreamRef s) {
  const RopeRows r = check_rows(k, y, x, base, s);
  const Shape& ps = positions.shape();
  if (ps.ndim != 1 || ps[0] != r.tokens)
    HZP_THROW(PreconditionError, k, ": positions has shape ", to_string(ps), ", expected [", r.tokens,
              "] (one position per token row of the input)");
  check_dtype(k, "positions", positions.dtype(), DType::i32);
  check_device(k, "positions", positions.device(), s);
  // Device memory is not read here: the caller checked the positions on the host before the upload.
  if (s.device().is_cuda()) return cuda::rope_at(y, x, positions, base, inverse, s);
  const auto* pos = positions.as<std::int32_t>();
  for (std::int64_t t = 0; t < r.tokens; ++t)
    if (pos[t] < 0)
      HZP_THROW(PreconditionError, k, ": positions[", t, "] = ", pos[t],
                " is negative (a token's position in its sequence counts from 0)");
  dispatch_rope(k, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rope_rotate_at_ref(y.as<T>(), x.as<T>(), pos, r.tokens, r.heads, r.head_dim, base, inverse);
  });
}

}  // namespace

void rope_fwd(TensorView y, ConstTensorView x, std::int64_t seq_len, double base, StreamRef s) {
  rope_launch("rope_fwd", y, x, seq_len, base, false, s);
}

void rope_bwd(TensorView dx, ConstTensorView dy, std::int64_t seq_len, double base, StreamRef s) {
  rope_launch("rope_bwd", dx, dy, seq_len, base, true, s);
}

void rope_fwd_at(TensorView y, ConstTensorView x, ConstTensorView positions, double base, StreamRef s) {
  rope_at_launch("rope_fwd_at", y, x, positions, base, false, s);
}

void rope_bwd_at(TensorView dx, ConstTensorView dy, ConstTensorView positions, double base, StreamRef s) {
  rope_at_launch("rope_bwd_at", dx, dy, positions, base, true, s);
}

}  // namespace hzp::kernels
