// cuBLASLt's entry points, loaded with dlopen on the first GEMM on a CUDA stream instead of linked: a
// process that never runs one (every CPU run and CPU test of a CUDA build) does not load the library,
// which cost each such process about 200 MB of resident memory and 0.2-0.9 s at start (docs/cuda.md
// "Cost in CPU-only runs"). The pointers have the header's own types, so every call is checked at compile
// time as if linked.
#pragma once

#include <cublasLt.h>

#include <string>

namespace hzp::kernels::cuda {

// Every entry point the GEMM twin calls, once: the table's members and the loader's lookups both come from
// this list, so a member cannot be left unbound.
#define HZP_CUBLASLT_ENTRY_POINTS(X)                                                                     \
  X(Create) X(GetStatusString) X(Matmul) X(MatmulAlgoGetHeuristic) X(MatmulDescCreate) X(MatmulDescDestroy) \
  X(MatmulDescSetAttribute) X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy)                          \
  X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy) X(MatrixLayoutSetAttribute)

/// cublasLt<Name> as member <Name>, with the header's own type.
struct CublasLt {
#define HZP_CUBLASLT_MEMBER(name) decltype(&cublasLt##name) name = nullptr;
  HZP_CUBLASLT_ENTRY_POINTS(HZP_CUBLASLT_MEMBER)
#undef HZP_CUBLASLT_MEMBER
};

/// The soname loaded: libcublasLt.so.<major of the headers built against>.
std::string cublaslt_soname();

/// Loads the library on the first call (thread-safe) and returns its entry points; CudaError naming the
/// file, the symbol and the fix when the library or a symbol is missing (every later call says the same).
const CublasLt& cublaslt();

}  // namespace hzp::kernels::cuda
