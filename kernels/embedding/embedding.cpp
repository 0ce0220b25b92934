// Embedding launchers on the CPU: validate shapes, dtypes and devices, then dispatch on the table's
// (or dout's) dtype to the reference templates in embedding_ref.hpp; a CUDA stream goes to the twin in
// embedding.cu (fp32 and bf16).
#include "hzp/kernels/embedding.hpp"

#include "common/cuda_twins.hpp"
#include "embedding/embedding_ref.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {
namespace {

void require_ndim(std::string_view kernel, std::string_view arg, const Shape& sh, int ndim) {
  if (sh.ndim != ndim)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " must be ", ndim, "-D, got shape ", to_string(sh));
}

DType grad_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

}  // namespace

void embedding_fwd(TensorView out, ConstTensorView tokens, ConstTensorView table, StreamRef s) {
  constexpr std::string_view k = "embedding_fwd";
  require_ndim(k, "tokens", tokens.shape(), 1);
  require_ndim(k, "table", table.shape(), 2);
  const std::int64_t n = tokens.shape()[0], vocab = table.shape()[0], dim = table.shape()[1];
  check_positive(k, "tokens", n);
  check_positive(k, "vocab (rows of table)", vocab);
  check_positive(k, "dim (columns of table)", dim);
  check_shape(k, "out", out.shape(), Shape{n, dim});
  check_dtype(k, "tokens", tokens.dtype(), DType::i32);
  check_dtype(k, "out", out.dtype(), table.dtype());
  check_device(k, "out", out.device(), s);
  check_device(k, "tokens", tokens.device(), s);
  check_device(k, "table", table.device(), s);
  if (s.device().is_cuda()) return cuda::embedding_fwd(out, tokens, table, s);
  const auto* ids = tokens.as<std::int32_t>();
  switch (table.dtype()) {
    case DType::f64: return embedding_fwd_ref(out.as<double>(), ids, table.as<double>(), n, vocab, dim);
    case DType::f32: return embedding_fwd_ref(out.as<float>(), ids, table.as<float>(), n, vocab, dim);
    case DType::bf16: return embedding_fwd_ref(out.as<bf16>(), ids, table.as<bf16>(), n, vocab, dim);
    default: HZP_THROW(PreconditionError, k, ": table has dtype ", dtype_name(table.dtype()),
                       "; expected fp64, fp32 or bf16");
  }
}

void embedding_bwd(TensorView dtable, ConstTensorView tokens, ConstTensorView dout, bool accumulate, StreamRef s) {
  constexpr std::string_view k = "embedding_bwd";
  require_ndim(k, "tokens", tokens.shape(), 1);
  require_ndim(k, "dtable", dtable.shape(), 2);
  const std::int64_t n = tokens.shape()[0], vocab = dtable.shape()[0], dim = dtable.shape()[1];
  check_positive(k, "tokens", n);
  check_positive(k, "vocab (rows of dtable)", vocab);
  check_positive(k, "dim (columns of dtable)", dim);
  check_shape(k, "dout", dout.shape(), Shape{n, dim});
  check_dtype(k, "tokens", tokens.dtype(), DType::i32);
  check_dtype(k, "dtable", dtable.dtype(), grad_dtype(dout.dtype()));
  check_device(k, "dtable", dtable.device(), s);
  check_device(k, "tokens", tokens.device(), s);
  check_device(k, "dout", dout.device(), s);
  if (s.device().is_cuda()) return cuda::embedding_bwd(dtable, tokens, dout, accumulate, s);
  const auto* ids = tokens.as<std::int32_t>();
  switch (dout.dtype()) {
    case DType::f64:
      return embedding_bwd_ref(dtable.as<double>(), ids, dout.as<double>(), n, vocab, dim, accumulate);
    case DType::f32:
      return embedding_bwd_ref(dtable.as<float>(), ids, dout.as<float>(), n, vocab, dim, accumulate);
    case DType::bf16:
      return embedding_bwd_ref(dtable.as<float>(), ids, dout.as<bf16>(), n, vocab, dim, accumulate);
    default: HZP_THROW(PreconditionError, k, ": dout has dtype ", dtype_name(dout.dtype()),
                       "; expected fp64, fp32 or bf16");
  }
}

}  // namespace hzp::kernels
