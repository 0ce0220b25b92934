// Which instruction set the CPU kernels' vectorised loops run on (kernels/common/exp_simd.hpp): the same
// source is compiled once for baseline x86-64 (SSE2) and once for AVX2, and each launcher picks one at run time,
// so one binary runs on any x86-64 and uses AVX2 where the CPU has it. Both builds perform the same IEEE
// operations lane by lane, in the same order and without fused multiply-adds, so they give the same bits: the
// choice changes speed only, never results (tests/kernels/test_exp_simd.cpp compares them).
#pragma once

#include <string_view>

namespace hzp::kernels {

enum class CpuIsa { baseline, avx2 };

std::string_view cpu_isa_name(CpuIsa isa) noexcept;

/// Whether this CPU (and its OS) can run `isa`'s build. baseline always can.
bool cpu_isa_supported(CpuIsa isa) noexcept;

/// The build the kernels dispatch to: the widest supported, unless set_cpu_isa chose another.
CpuIsa cpu_isa() noexcept;

/// Makes the kernels dispatch to `isa` from now on (for tests and benchmarks that compare the builds) and returns
/// the previous choice. Throws PreconditionError when the CPU cannot run it. Not meant to change while kernels run
/// on other threads (it is one relaxed atomic: a kernel already running keeps the build it started with).
CpuIsa set_cpu_isa(CpuIsa isa);

}  // namespace hzp::kernels
