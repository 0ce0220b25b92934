// The element-wise add launcher: validation, then the CPU loop (add_ref) or the CUDA twin (add.cu).
#include "hzp/kernels/add.hpp"

#include "common/cuda_twins.hpp"
#include "common/cpu_parallel.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {
namespace {

template <typename T>
void add_ref(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = store<T>(load<T>(a[i]) + load<T>(b[i]));
}

}  // namespace

void add(TensorView out, ConstTensorView a, ConstTensorView b, StreamRef s) {
  constexpr std::string_view k = "add";
  HZP_CHECK(out.dtype() == a.dtype() && a.dtype() == b.dtype(), "add: dtypes ", dtype_name(out.dtype()), ", ",
            dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " differ");
  HZP_CHECK(out.numel() == a.numel() && a.numel() == b.numel(), "add: element counts ", out.numel(), ", ",
            a.numel(), ", ", b.numel(), " differ");
  check_device(k, "out", out.device(), s);
  check_device(k, "a", a.device(), s);
  check_device(k, "b", b.device(), s);
  if (s.device().is_cuda()) return cuda::add(out, a, b, s);
  const DType t = out.dtype();
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    HZP_THROW(PreconditionError, "add: unsupported dtype ", dtype_name(t));
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    for_element_ranges(out.numel(), [&](std::int64_t lo, std::int64_t hi) {
      add_ref(out.as<T>() + lo, a.as<T>() + lo, b.as<T>() + lo, hi - lo);
    });
  });
}

}  // namespace hzp::kernels
