// The CPU kernels' run-time choice between their baseline x86-64 and AVX2 builds (hzp/kernels/cpu_isa.hpp).
#include "hzp/kernels/cpu_isa.hpp"

#include <atomic>

#include "hzp/core/error.hpp"

namespace hzp::kernels {
namespace {

CpuIsa widest_supported() noexcept {
  return cpu_isa_supported(CpuIsa::avx2) ? CpuIsa::avx2 : CpuIsa::baseline;
}

std::atomic<CpuIsa>& chosen() noexcept {
  static std::atomic<CpuIsa> isa{widest_supported()};
  return isa;
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) noexcept {
  return isa == CpuIsa::avx2 ? "avx2" : "baseline";
}

bool cpu_isa_supported(CpuIsa isa) noexcept {
  if (isa == CpuIsa::baseline) return true;
#if defined(__x86_64__) && defined(__GNUC__)
  // libgcc's check includes the OS's support for the YMM state (XGETBV), not only the CPUID bit.
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

CpuIsa cpu_isa() noexcept { return chosen().load(std::memory_order_relaxed); }

CpuIsa set_cpu_isa(CpuIsa isa) {
  if (!cpu_isa_supported(isa))
    HZP_THROW(PreconditionError, "set_cpu_isa: this CPU cannot run the ", cpu_isa_name(isa),
              " build of the kernels; baseline always runs");
  return chosen().exchange(isa, std::memory_order_relaxed);
}

}  // namespace hzp::kernels
