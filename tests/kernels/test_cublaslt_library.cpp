// cuBLASLt's loader (kernels/gemm/cublaslt_library.hpp), in CUDA builds, without a GPU: the soname the
// headers name loads, every entry point the GEMM twin calls resolves, a host-only call answers, and the
// library is mapped only from the first call on.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "gemm/cublaslt_library.hpp"

namespace {

bool cublaslt_mapped() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("libcublasLt") != std::string::npos) return true;
  return false;
}

TEST(CublasLtLibrary, LoadsOnFirstUseWithEveryEntryPoint) {
  EXPECT_FALSE(cublaslt_mapped()) << "loaded before the first call";
  const hzp::kernels::cuda::CublasLt& lt = hzp::kernels::cuda::cublaslt();
  EXPECT_TRUE(cublaslt_mapped());
  EXPECT_EQ(hzp::kernels::cuda::cublaslt_soname(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
#define HZP_EXPECT_BOUND(name) EXPECT_NE(reinterpret_cast<const void*>(lt.name), nullptr) << "cublasLt" #name;
  HZP_CUBLASLT_ENTRY_POINTS(HZP_EXPECT_BOUND)
#undef HZP_EXPECT_BOUND
  // A host-only call through the table answers (cuBLASLt 13 spells it "success").
  const char* ok = lt.GetStatusString(CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(ok, nullptr);
  EXPECT_STRNE(ok, lt.GetStatusString(CUBLAS_STATUS_NOT_INITIALIZED));
  EXPECT_EQ(&hzp::kernels::cuda::cublaslt(), &lt) << "loaded once";
}

}  // namespace
