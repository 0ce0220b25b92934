// The CUDA twin of gemm (gemm.cpp): cuBLASLt with fp32 accumulation for bf16 operands (C in bf16 or
// fp32) and fp32 compute for fp32 (no TF32: the fp32 path is the accuracy reference on the GPU), fp64
// for fp64. Row-major operands are handed to cuBLASLt as their column-major transposes:
//   C = op(A)·op(B)  (row-major)  <=>  Cᵀ = op(B)ᵀ·op(A)ᵀ  (column-major)
// so cuBLASLt's "A" is our B and its "B" our A, each with its own transpose flag unchanged. One
// cuBLASLt handle per device, and the heuristic's best algorithm cached per problem, both under a mutex.
// cuBLASLt is called through cublaslt() (loaded on the first GEMM, cublaslt_library.hpp), not linked.
#include <map>
#include <mutex>
#include <tuple>

#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"
#include "gemm/cublaslt_library.hpp"

namespace hzp::kernels::cuda {
namespace {

const char* describe_cublas(cublasStatus_t st) { return cublaslt().GetStatusString(st); }
#define HZP_CUBLAS_CHECK(stmt) HZP_CHECK_CALL(stmt, ::hzp::CudaError, hzp_status == CUBLAS_STATUS_SUCCESS, describe_cublas)

constexpr std::size_t kWorkspace = std::size_t{32} << 20;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f64: return CUDA_R_64F;
    default: HZP_THROW(UnsupportedError, "gemm: dtype ", dtype_name(t), " has no cuBLASLt path");
  }
}

// Problem key for the algorithm cache: everything the heuristic's answer depends on, pointer alignment
// included (an algorithm chosen for 256-byte aligned operands may require it).
using Key = std::tuple<int, int, int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       std::int64_t, int, bool, bool, std::int64_t, std::int64_t, std::int64_t, bool>;

/// The largest power of two (at most 256) dividing the address: what the heuristic may assume.
std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

/// The alignment every matrix of a strided batch has: its base's and its stride's in bytes.
std::uint32_t alignment_of(const MatrixDesc& d, int batch) {
  const std::uint32_t base = alignment_of(d.data);
  if (batch <= 1) return base;
  const auto stride = static_cast<std::uintptr_t>(d.batch_stride) * dtype_size(d.dtype);
  const std::uint32_t st = alignment_of(reinterpret_cast<const void*>(stride == 0 ? 256 : stride));
  return base < st ? base : st;
}

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  std::map<Key, cublasLtMatmulAlgo_t> algos;
};

std::mutex g_mutex;
std::map<int, DeviceState> g_devices;  // handles live for the process (destroying them at exit races the driver)

// RAII for the per-call descriptors.
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, std::int64_t rows, std::int64_t cols, std::int64_t ld, int batch, std::int64_t stride) {
    HZP_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&h, t, static_cast<std::uint64_t>(rows),
                                                static_cast<std::uint64_t>(cols), ld));
    if (batch > 1) {
      HZP_CUBLAS_CHECK(cublaslt().MatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
      HZP_CUBLAS_CHECK(cublaslt().MatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                        sizeof(stride)));
    }
  }
  ~Layout() { (void)cublaslt().MatrixLayoutDestroy(h); }
};

}  // namespace

bool built() noexcept { return true; }
std::size_t gemm_workspace_bytes() noexcept { return kWorkspace; }

void gemm_strided_batched(const MatrixDesc& c, const MatrixDesc& a, const MatrixDesc& b, bool trans_a, bool trans_b,
                          float alpha, float beta, int batch, std::span<std::byte> workspace, StreamRef s) {
  const std::int64_t m = trans_a ? a.cols : a.rows, k = trans_a ? a.rows : a.cols;
  const std::int64_t n = trans_b ? b.rows : b.cols;
  HZP_CHECK(c.rows == m && c.cols == n, "gemm (cuda): c is [", c.rows, ", ", c.cols, "], expected [", m, ", ", n, "]");
  HZP_CHECK(workspace.size() >= kWorkspace && workspace.data() != nullptr, "gemm (cuda): workspace of ",
            workspace.size(), " bytes is smaller than the ", kWorkspace, " cuBLASLt needs (gemm_workspace_bytes)");
  const bool f64 = a.dtype == DType::f64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_t = f64 ? CUDA_R_64F : CUDA_R_32F;
  const int device = s.device().index;

  // cuBLASLt sees column-major: our row-major X[r, c] with ld is its [c, r] with the same ld.
  Layout la(cuda_type(b.dtype), b.cols, b.rows, b.ld, batch, b.batch_stride);  // its A = our B
  Layout lb(cuda_type(a.dtype), a.cols, a.rows, a.ld, batch, a.batch_stride);  // its B = our A
  Layout lc(cuda_type(c.dtype), c.cols, c.rows, c.ld, batch, c.batch_stride);
  cublasLtMatmulDesc_t op = nullptr;
  HZP_CUBLAS_CHECK(cublaslt().MatmulDescCreate(&op, compute, scale_t));
  struct OpGuard {
    cublasLtMatmulDesc_t h;
    ~OpGuard() { (void)cublaslt().MatmulDescDestroy(h); }
  } op_guard{op};
  const cublasOperation_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  HZP_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  HZP_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulAlgo_t algo{};
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState& ds = g_devices[device];
    if (ds.handle == nullptr) HZP_CUBLAS_CHECK(cublaslt().Create(&ds.handle));
    handle = ds.handle;
    const Key key{device, static_cast<int>(a.dtype), static_cast<int>(c.dtype), batch, m, n, k, a.ld, b.ld, c.ld,
                  static_cast<int>(alignment_of(a, batch) | (alignment_of(b, batch) << 9) | (alignment_of(c, batch) << 18)),
                  trans_a, trans_b, a.batch_stride, b.batch_stride, c.batch_stride, beta != 0.0f};
    auto it = ds.algos.find(key);
    if (it == ds.algos.end()) {
      cublasLtMatmulPreference_t pref = nullptr;
      HZP_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref));
      const std::uint64_t ws = kWorkspace;
      (void)cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
      // cuBLASLt's A is our B (see the file comment); C and D are the same buffer.
      const std::uint32_t al_a = alignment_of(b, batch), al_b = alignment_of(a, batch), al_c = alignment_of(c, batch);
      (void)cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
      (void)cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
      (void)cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
      (void)cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t st = cublaslt().MatmulAlgoGetHeuristic(handle, op, la.h, lb.h, lc.h, lc.h, pref, 1, &result,
                                                               &found);
      (void)cublaslt().MatmulPreferenceDestroy(pref);
      if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        HZP_THROW(CudaError, "gemm (cuda): cuBLASLt has no algorithm for M=", m, " N=", n, " K=", k, " a ",
                  dtype_name(a.dtype), " c ", dtype_name(c.dtype), " (", describe_cublas(st), ")");
      it = ds.algos.emplace(key, result.algo).first;
    }
    algo = it->second;
  }
  const double alpha64 = alpha, beta64 = beta;
  const void* pa = f64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha);
  const void* pb = f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta);
  HZP_CUBLAS_CHECK(cublaslt().Matmul(handle, op, pa, b.data, la.h, a.data, lb.h, pb, c.data, lc.h,
                                  const_cast<void*>(c.data), lc.h, &algo, workspace.data(), kWorkspace, native(s)));
}

void gemm(TensorView c, ConstTensorView a, ConstTensorView b, bool trans_a, bool trans_b, float alpha, float beta,
          std::span<std::byte> workspace, StreamRef s) {
  const MatrixDesc mc{c.data(), c.dtype(), c.shape()[0], c.shape()[1], c.shape()[1], 0};
  const MatrixDesc ma{a.data(), a.dtype(), a.shape()[0], a.shape()[1], a.shape()[1], 0};
  const MatrixDesc mb{b.data(), b.dtype(), b.shape()[0], b.shape()[1], b.shape()[1], 0};
  gemm_strided_batched(mc, ma, mb, trans_a, trans_b, alpha, beta, 1, workspace, s);
}

}  // namespace hzp::kernels::cuda
