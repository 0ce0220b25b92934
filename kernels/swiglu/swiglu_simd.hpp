// SwiGLU's vectorised fp32 loops (baseline and AVX2 builds of one body, the same bits in both): the formulas of
// swiglu_ref.hpp, operation for operation, with std::exp replaced by exp_simd.hpp's exp8. The launchers
// (swiglu.cpp) run them for fp32 and, on fp32 widenings of each chunk, for bf16; fp64 keeps the reference.
#pragma once

#include <cstdint>

namespace hzp::kernels::simd {

/// out[i] = g·σ(g)·up[i], g = gate[i]. out may alias gate or up.
void swiglu_fwd(float* out, const float* gate, const float* up, std::int64_t n);

/// dgate[i] = dout·up·σ(g)·(1 + g·(1 − σ(g))), dup[i] = dout·g·σ(g). dgate may alias gate, dup may alias up.
void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, std::int64_t n);

}  // namespace hzp::kernels::simd
