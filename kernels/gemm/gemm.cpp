// GEMM launcher on the CPU: validates the operands, then calls OpenBLAS (dgemm for fp64, sgemm for
// fp32, and sgemm on fp32 widenings held in the caller's workspace for bf16), split over the intra-op pool.
// The triple-loop reference in gemm_ref.hpp is the oracle; this file is the production CPU path.
#include "hzp/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "hzp/core/error.hpp"
#include "hzp/core/intra_op.hpp"
#include "common/cuda_twins.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {
namespace {

constexpr std::string_view kGemm = "gemm";
// Each workspace part starts on a cache line, so widened operands never share a line with the
// previous part and vector loads in OpenBLAS see aligned data.
constexpr std::size_t kAlign = 64;

std::size_t round_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

struct Dims {
  std::int64_t m, n, k;
};

void require_2d(std::string_view arg, const Shape& s) {
  if (s.ndim != 2) HZP_THROW(PreconditionError, kGemm, ": ", arg, " must be 2-D, got shape ", to_string(s));
}

// Shapes of op(A) = [M, K] and op(B) = [K, N] must agree on K and C must be [M, N]; every message names
// the views' actual shapes and the transpose flags, since a wrong flag is the usual cause.
Dims gemm_dims(const Shape& c, const Shape& a, const Shape& b, bool trans_a, bool trans_b) {
  require_2d("a", a);
  require_2d("b", b);
  require_2d("c", c);
  const Dims d{trans_a ? a[1] : a[0], trans_b ? b[0] : b[1], trans_a ? a[0] : a[1]};
  const std::int64_t kb = trans_b ? b[1] : b[0];
  if (d.k != kb)
    HZP_THROW(PreconditionError, kGemm, ": inner dimensions differ: op(a) is [", d.m, ", ", d.k, "] (a ",
              to_string(a), ", trans_a=", trans_a, ") but op(b) is [", kb, ", ", d.n, "] (b ", to_string(b),
              ", trans_b=", trans_b, ")");
  check_shape(kGemm, "c", c, Shape{d.m, d.n});
  check_positive(kGemm, "M (rows of op(a) and c)", d.m);
  check_positive(kGemm, "N (columns of op(b) and c)", d.n);
  check_positive(kGemm, "K (inner dimension)", d.k);
  // OpenBLAS here is built with 32-bit indices (blasint = int).
  constexpr std::int64_t kMax = std::numeric_limits<blasint>::max();
  if (d.m * d.k > kMax || d.k * d.n > kMax || d.m * d.n > kMax)
    HZP_THROW(PreconditionError, kGemm, ": operands a ", to_string(a), ", b ", to_string(b),
              " exceed OpenBLAS's 32-bit index range");
  return d;
}

void check_dtypes(DType c, DType a, DType b) {
  if (a != b)
    HZP_THROW(PreconditionError, kGemm, ": a has dtype ", dtype_name(a), " but b has dtype ", dtype_name(b),
              "; operands must share a dtype");
  const bool ok = (a == DType::f64 && c == DType::f64) || (a == DType::f32 && c == DType::f32) ||
                  (a == DType::bf16 && (c == DType::bf16 || c == DType::f32));
  if (!ok)
    HZP_THROW(PreconditionError, kGemm, ": unsupported dtypes a,b=", dtype_name(a), " c=", dtype_name(c),
              "; allowed: fp64->fp64, fp32->fp32, bf16->bf16, bf16->fp32");
}

struct WorkspaceLayout {
  std::size_t a = 0, b = 0, c = 0;  // bytes of each fp32 staging buffer (0 = not needed)
  std::size_t total() const { return a + b + c == 0 ? 0 : a + b + c + kAlign; }  // + base alignment slack
};

WorkspaceLayout layout(DType c, DType ab, const Dims& d) {
  WorkspaceLayout l;
  if (ab == DType::bf16) {
    l.a = round_up(static_cast<std::size_t>(d.m * d.k) * sizeof(float));
    l.b = round_up(static_cast<std::size_t>(d.k * d.n) * sizeof(float));
  }
  if (c == DType::bf16) l.c = round_up(static_cast<std::size_t>(d.m * d.n) * sizeof(float));
  return l;
}

CBLAS_TRANSPOSE op(bool t) { return t ? CblasTrans : CblasNoTrans; }

// Columns (or rows) per block when a GEMM is split over the intra-op pool: a multiple of the AVX-512 kernels'
// register tile, and large enough that each range's packing of the shared operand stays small beside its work.
constexpr std::int64_t kSplitBlock = 64;

// C = alpha·op(A)·op(B) + beta·C through one BLAS call per range of the intra-op pool: the longer of C's
// dimensions is cut into blocks (columns: B's columns and C's; rows: A's rows and C's). Every element of C is
// still one dot product over the whole of K, so the split moves no sum across threads.
template <typename T, typename Gemm>
void split_gemm(Gemm blas, bool trans_a, bool trans_b, const Dims& d, T alpha, const T* a, blasint lda, const T* b,
                blasint ldb, T beta, T* c, blasint ldc) {
  const bool by_columns = d.n >= d.m;
  const std::int64_t extent = by_columns ? d.n : d.m;
  const std::int64_t blocks = (extent + kSplitBlock - 1) / kSplitBlock;
  core::parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t lo = b0 * kSplitBlock, hi = std::min(extent, b1 * kSplitBlock);
    const auto len = static_cast<blasint>(hi - lo);
    if (by_columns) {
      // Columns lo..hi of op(B): B's columns when B is [K, N], its rows when B is [N, K].
      const T* bb = trans_b ? b + lo * ldb : b + lo;
      blas(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(d.m), len, static_cast<blasint>(d.k), alpha,
           a, lda, bb, ldb, beta, c + lo, ldc);
    } else {
      // Rows lo..hi of op(A): A's rows when A is [M, K], its columns when A is [K, M].
      const T* aa = trans_a ? a + lo : a + lo * lda;
      blas(CblasRowMajor, op(trans_a), op(trans_b), len, static_cast<blasint>(d.n), static_cast<blasint>(d.k), alpha,
           aa, lda, b, ldb, beta, c + lo * ldc, ldc);
    }
  });
}

}  // namespace

std::size_t gemm_workspace_bytes(ConstTensorView c, ConstTensorView a, ConstTensorView b, bool trans_a,
                                 bool trans_b) {
  const Dims d = gemm_dims(c.shape(), a.shape(), b.shape(), trans_a, trans_b);
  check_dtypes(c.dtype(), a.dtype(), b.dtype());
  if (c.device().is_cuda()) return cuda::gemm_workspace_bytes();
  return layout(c.dtype(), a.dtype(), d).total();
}

void gemm(TensorView c, ConstTensorView a, ConstTensorView b, bool trans_a, bool trans_b, float alpha,
          float beta, std::span<std::byte> workspace, StreamRef s) {
  const Dims d = gemm_dims(c.shape(), a.shape(), b.shape(), trans_a, trans_b);
  check_dtypes(c.dtype(), a.dtype(), b.dtype());
  check_device(kGemm, "a", a.device(), s);
  check_device(kGemm, "b", b.device(), s);
  check_device(kGemm, "c", c.device(), s);
  if (s.device().is_cuda()) {
    check_workspace(kGemm, workspace.data() ? workspace.size() : 0, cuda::gemm_workspace_bytes());
    return cuda::gemm(c, a, b, trans_a, trans_b, alpha, beta, workspace, s);
  }
  const WorkspaceLayout wl = layout(c.dtype(), a.dtype(), d);

  // Row-major leading dimensions are the stored views' column counts.
  const auto n = static_cast<blasint>(d.n);
  const auto lda = static_cast<blasint>(a.shape()[1]), ldb = static_cast<blasint>(b.shape()[1]);

  if (a.dtype() == DType::f64) {
    return split_gemm<double>(cblas_dgemm, trans_a, trans_b, d, alpha, a.as<double>(), lda, b.as<double>(), ldb, beta,
                              c.as<double>(), n);
  }
  if (a.dtype() == DType::f32) {
    return split_gemm<float>(cblas_sgemm, trans_a, trans_b, d, alpha, a.as<float>(), lda, b.as<float>(), ldb, beta,
                             c.as<float>(), n);
  }

  // bf16 operands: widen into the workspace (exact: bf16 is a truncated fp32), one sgemm, and for a
  // bf16 C a single rounding of the fp32 result, which is what "fp32 accumulation inside" promises.
  check_workspace(kGemm, workspace.data() ? workspace.size() : 0, wl.total());
  auto base = reinterpret_cast<std::uintptr_t>(workspace.data());
  base = (base + kAlign - 1) / kAlign * kAlign;
  auto* wa = reinterpret_cast<float*>(base);
  auto* wb = reinterpret_cast<float*>(base + wl.a);
  auto* wc = reinterpret_cast<float*>(base + wl.a + wl.b);

  float_from_bf16(wa, a.as<bf16>(), static_cast<std::size_t>(a.numel()));
  float_from_bf16(wb, b.as<bf16>(), static_cast<std::size_t>(b.numel()));
  if (c.dtype() == DType::f32) {
    return split_gemm<float>(cblas_sgemm, trans_a, trans_b, d, alpha, wa, lda, wb, ldb, beta, c.as<float>(), n);
  }
  bf16* cb = c.as<bf16>();
  const auto mn = static_cast<std::size_t>(c.numel());
  // beta == 0 must not read C (it may be uninitialised): only stage C when it contributes.
  if (beta != 0.0f) float_from_bf16(wc, cb, mn);
  split_gemm<float>(cblas_sgemm, trans_a, trans_b, d, alpha, wa, lda, wb, ldb, beta, wc, n);
  bf16_from_float(cb, wc, mn);
}

}  // namespace hzp::kernels
