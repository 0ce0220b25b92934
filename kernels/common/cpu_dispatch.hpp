// How a CPU kernel's loop is built twice, for baseline x86-64 and for AVX2, and one of the two picked at run time by
// cpu_isa() (hzp/kernels/cpu_isa.hpp): HZP_TARGET_AVX2 marks the AVX2 build, HZP_SIMD_DISPATCH defines the pair and
// the dispatching function from one always-inline body. The two builds must give the same bits (no fused
// multiply-add: AVX2 without "fma", and the files built with -ffp-contract=off, kernels/CMakeLists.txt).
#pragma once

#include "hzp/kernels/cpu_isa.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define HZP_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define HZP_TARGET_AVX2
#endif
#define HZP_SIMD_INLINE inline __attribute__((always_inline))

/// Defines `ret name params` (params in parentheses, args the same names in parentheses) calling the AVX2 or the
/// baseline build of `name##_body<CpuIsa>`, an HZP_SIMD_INLINE template taking the same arguments, as cpu_isa()
/// says. The template argument tells the body's helpers which build they are inlined into (exp_simd.hpp's less()).
#define HZP_SIMD_DISPATCH(ret, name, params, args)                                                              \
  HZP_TARGET_AVX2 static ret name##_avx2 params { return name##_body<::hzp::kernels::CpuIsa::avx2> args; }     \
  static ret name##_baseline params { return name##_body<::hzp::kernels::CpuIsa::baseline> args; }            \
  ret name params {                                                                                             \
    return ::hzp::kernels::cpu_isa() == ::hzp::kernels::CpuIsa::avx2 ? name##_avx2 args : name##_baseline args; \
  }
