// cuBLASLt's entry points, loaded with dlopen on the first GEMM on a CUDA stream instead of linked: a
// process that never runs one (every CPU run and CPU test of a CUDA build) does not load the library,
// which cost each such process about 200 MB of resident memory and 0.2-0.9 s at start (docs/cuda.md
// "Cost in CPU-only runs"). The pointers have the header's own types, so every call is checked at compile
// time as if linked.
#pragma once

#include <cublasLt.h>

#include <string>

namespace hzp::kernels::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute = nullptr;
};

/// The soname loaded: libcublasLt.so.<major of the headers built against>.
std::string cublaslt_soname();

/// Loads the library on the first call (thread-safe) and returns its entry points; CudaError naming the
/// file, the symbol and the fix when the library or a symbol is missing (every later call says the same).
const CublasLt& cublaslt();

}  // namespace hzp::kernels::cuda
