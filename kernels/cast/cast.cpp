// Cast launcher on the CPU: validates equal shapes and a supported dtype pair, then dispatches to
// cast_ref.hpp, or for a CUDA stream to cast.cu. Supported: fp32 -> bf16, bf16 -> fp32, fp32 -> fp32, bf16 -> bf16.
#include "hzp/kernels/cast.hpp"

#include "cast/cast_ref.hpp"
#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {

void cast(TensorView out, ConstTensorView in, StreamRef s) {
  constexpr std::string_view k = "cast";
  check_positive(k, "number of elements of in " + to_string(in.shape()), in.numel());
  check_shape(k, "out", out.shape(), in.shape());
  check_device(k, "out", out.device(), s);
  check_device(k, "in", in.device(), s);
  const std::int64_t n = in.numel();
  const DType from = in.dtype(), to = out.dtype();
  if (s.device().is_cuda()) return cuda::cast(out, in, s);
  if (from == DType::f32 && to == DType::bf16) return cast_ref(out.as<bf16>(), in.as<float>(), n);
  if (from == DType::bf16 && to == DType::f32) return cast_ref(out.as<float>(), in.as<bf16>(), n);
  if (from == DType::f32 && to == DType::f32) return cast_ref(out.as<float>(), in.as<float>(), n);
  if (from == DType::bf16 && to == DType::bf16) return cast_ref(out.as<bf16>(), in.as<bf16>(), n);
  HZP_THROW(PreconditionError, k, ": unsupported conversion ", dtype_name(from), " -> ", dtype_name(to),
            "; supported: fp32->bf16, bf16->fp32, fp32->fp32, bf16->bf16");
}

}  // namespace hzp::kernels
