// better_blas_core, restart_with_better_blas_core and blas_core_name (blas_core.hpp).
#include "blas_core.hpp"

#include <cblas.h>
#include <cpuid.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace hzp::harness {
namespace {

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512 = false;
};

CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  if (!osxsave) return f;
  // The OS must save the wide registers (XCR0: SSE, AVX and, for AVX-512, the opmask and upper ZMM state).
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const bool ymm = (lo & 0x6) == 0x6, zmm = (lo & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return f;
  f.avx2 = ymm && ((b >> 5) & 1);
  f.avx512 = zmm && ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);  // F, BW, VL
  return f;
}

}  // namespace

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  const std::string core = blas_core_name();
  if (core != "Prescott" && core != "prescott") return "";
  const CpuFeatures f = cpu_features();
  if (f.avx512 && f.fma) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

std::string narrower_blas_core_note() {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  if (env == nullptr) return "";
  std::string core = blas_core_name();
  for (char& ch : core) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const CpuFeatures f = cpu_features();
  if (!f.avx512 || !f.fma || core == "skylakex" || core == "cooperlake" || core == "sapphirerapids") return "";
  return std::string("OPENBLAS_CORETYPE=") + env + " from the environment keeps OpenBLAS off this CPU's AVX-512 "
         "kernels (about half the sgemm rate on the machines measured; docs/environment.md): unset it, or set "
         "SkylakeX";
}

void restart_with_better_blas_core(char** argv) {
  if (const char* keep = std::getenv("HZP_KEEP_BLAS_CORE"); keep != nullptr && std::string_view(keep) == "1") return;
  const std::string core = better_blas_core();
  if (core.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Only reached when the exec failed: go on with the generic kernels (the results file names them).
  std::fprintf(stderr, "hzpbench: OpenBLAS chose its generic Prescott kernels on this CPU and restarting with "
                       "OPENBLAS_CORETYPE=%s failed; continuing with the slow kernels\n", core.c_str());
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace hzp::harness
