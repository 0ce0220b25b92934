// cublaslt() (cublaslt_library.hpp): dlopen of the cuBLASLt the headers name, once per process.
#include "cublaslt_library.hpp"

#include <dlfcn.h>

#include <mutex>

#include "hzp/core/error.hpp"

namespace hzp::kernels::cuda {

std::string cublaslt_soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

namespace {

struct Loaded {
  CublasLt api;
  std::string error;  // empty when every entry point was found
};

Loaded load() {
  Loaded l;
  const std::string name = cublaslt_soname();
  // The loader's own search (LD_LIBRARY_PATH, the executable's RUNPATH, which names the toolkit's lib
  // directory in a build tree, ldconfig): where the CUDA runtime beside it was found. Kept open for good.
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    l.error = "cannot load " + name + " (" + dlerror() + "). Fix: install the CUDA toolkit's cuBLAS " +
              std::to_string(CUBLAS_VER_MAJOR) + " or put its lib directory on LD_LIBRARY_PATH";
    return l;
  }
  auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (fn == nullptr && l.error.empty())
      l.error = name + " has no symbol " + symbol + ": a cuBLAS older than the " + std::to_string(CUBLAS_VER_MAJOR) +
                ".x headers this build used. Fix: put a matching cuBLAS on LD_LIBRARY_PATH";
  };
#define HZP_CUBLASLT_BIND(name) bind(l.api.name, "cublasLt" #name);
  HZP_CUBLASLT_ENTRY_POINTS(HZP_CUBLASLT_BIND)
#undef HZP_CUBLASLT_BIND
  return l;
}

}  // namespace

const CublasLt& cublaslt() {
  static const Loaded loaded = load();  // thread-safe initialisation, once
  if (!loaded.error.empty()) HZP_THROW(CudaError, "gemm on a CUDA stream: ", loaded.error);
  return loaded.api;
}

}  // namespace hzp::kernels::cuda
