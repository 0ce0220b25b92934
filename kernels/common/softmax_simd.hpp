// Vectorised fp32 row passes of a softmax, built on exp_simd.hpp's exp8 (baseline and AVX2 builds, the same
// bits in both): the row maximum, Σ e^(x − shift) in fp64 or fp32 lanes, e^(x − shift)·scale written out, and the
// softmax backward's p = e^(s − lse), ds = p·(dp − Δ). The cross-entropy and the tiled attention use them for fp32
// and bf16 (whose rows they widen to fp32 first); their scalar references (cross_entropy_ref.hpp,
// attention_ref.hpp, std::exp) stay the oracles. Each function reads and writes only its row, and its result
// depends only on the row's values and length, never on which thread runs it.
#pragma once

#include <cstdint>

namespace hzp::kernels::simd {

/// y[i] = e^x[i] for i < n (y may alias x): the array form of exp8, for tests and benchmarks.
void exp(float* y, const float* x, std::int64_t n);

/// max_i x[i] over n ≥ 1 values: one of them, exactly.
float row_max(const float* x, std::int64_t n);

/// Σ_i e^(x[i] − shift), each term widened to fp64 and summed in fp64 lanes (as cross_entropy_ref.hpp's fp64 sum).
double sum_exp_f64(const float* x, std::int64_t n, float shift);

/// x[i] ← e^(x[i] − shift); returns Σ_i of the new x[i] in fp32 (eight lane sums, then hsum).
float exp_in_place_sum(float* x, std::int64_t n, float shift);

/// y[i] = e^(x[i] − shift) · scale (y may alias x).
void exp_scaled(float* y, const float* x, std::int64_t n, float shift, float scale);

/// p[i] ← e^(p[i] − lse); ds[i] ← p[i]·(ds[i] − delta): a softmax row's probabilities from its scores and
/// log-sum-exp, and the score gradient from dP = ds and Δ = Σ p·dP.
void softmax_bwd_row(float* p, float* ds, std::int64_t n, float lse, float delta);

}  // namespace hzp::kernels::simd
