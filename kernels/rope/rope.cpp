// RoPE launchers on the CPU: validate [tokens, heads, head_dim] views (head_dim even, tokens a
// multiple of seq_len, base > 0), then dispatch on dtype to rope_ref.hpp (a CUDA stream: rope.cu).
#include "hzp/kernels/rope.hpp"

#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "common/cuda_twins.hpp"
#include "rope/rope_ref.hpp"

namespace hzp::kernels {
namespace {

void rope_launch(std::string_view k, TensorView y, ConstTensorView x, std::int64_t seq_len, double base,
                 bool inverse, StreamRef s) {
  const Shape& sh = x.shape();
  if (sh.ndim != 3)
    HZP_THROW(PreconditionError, k, ": input must be 3-D [tokens, heads, head_dim], got shape ", to_string(sh));
  const std::int64_t tokens = sh[0], heads = sh[1], head_dim = sh[2];
  check_positive(k, "tokens", tokens);
  check_positive(k, "heads", heads);
  check_positive(k, "head_dim", head_dim);
  check_positive(k, "seq_len", seq_len);
  if (head_dim % 2 != 0)
    HZP_THROW(PreconditionError, k, ": head_dim = ", head_dim, " must be even (rotate-half pairs j with j + ",
              "head_dim/2)");
  if (tokens % seq_len != 0)
    HZP_THROW(PreconditionError, k, ": tokens = ", tokens, " is not a multiple of seq_len = ", seq_len,
              " (tokens = batch·seq_len)");
  if (!(base > 0.0)) HZP_THROW(PreconditionError, k, ": base = ", base, " must be > 0");
  check_shape(k, "output", y.shape(), sh);
  check_dtype(k, "output", y.dtype(), x.dtype());
  check_device(k, "output", y.device(), s);
  check_device(k, "input", x.device(), s);
  if (s.device().is_cuda()) return cuda::rope(y, x, seq_len, base, inverse, s);
  switch (x.dtype()) {
    case DType::f64:
      return rope_rotate_ref(y.as<double>(), x.as<double>(), tokens, heads, head_dim, seq_len, base, inverse);
    case DType::f32:
      return rope_rotate_ref(y.as<float>(), x.as<float>(), tokens, heads, head_dim, seq_len, base, inverse);
    case DType::bf16:
      return rope_rotate_ref(y.as<bf16>(), x.as<bf16>(), tokens, heads, head_dim, seq_len, base, inverse);
    default:
      HZP_THROW(PreconditionError, k, ": input has dtype ", dtype_name(x.dtype()), "; expected fp64, fp32 or bf16");
  }
}

}  // namespace

void rope_fwd(TensorView y, ConstTensorView x, std::int64_t seq_len, double base, StreamRef s) {
  rope_launch("rope_fwd", y, x, seq_len, base, false, s);
}

void rope_bwd(TensorView dx, ConstTensorView dy, std::int64_t seq_len, double base, StreamRef s) {
  rope_launch("rope_bwd", dx, dy, seq_len, base, true, s);
}

}  // namespace hzp::kernels
