// Counter-based random numbers for the data sources (private to hzp_workloads). Every draw is a pure
// function of a key folded from (seed, stream tag, indices..., counter) — never of a generator's state
// advanced by earlier calls — so the chain table and sample(i) do not depend on call order or thread.
// Hashing is SplitMix64's finaliser; the gamma sampler is Marsaglia–Tsang, done in log space.
#pragma once

#include <cmath>
#include <cstdint>

namespace hzp::workloads::rng {

__extension__ typedef unsigned __int128 u128;  // GCC/Clang builtin; __extension__ keeps -Wpedantic quiet

/// SplitMix64's output function (Steele, Lea & Flood 2014, constants from Stafford's "mix13"):
/// a bijection of 64-bit words with full avalanche, so nearby counters give unrelated words.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Folds one more word into a key. For a fixed key, v ↦ fold(key, v) is a bijection (XOR with a
/// bijection of v, then a bijection), so distinct indices under one key never share a stream.
constexpr std::uint64_t fold(std::uint64_t key, std::uint64_t v) noexcept {
  return mix64(key ^ mix64(v + 0x9E3779B97F4A7C15ull));
}

/// Stream tags: one per use of the seed, so the table and the samples are unrelated draws.
inline constexpr std::uint64_t kTagSuccessors = 0x5355434345535352ull;  // "SUCCESSR"
inline constexpr std::uint64_t kTagWeights = 0x5745494748545321ull;     // "WEIGHTS!"
inline constexpr std::uint64_t kTagSample = 0x53414D504C452121ull;      // "SAMPLE!!"

/// Uniform in [0, 1) with 53 random bits.
constexpr double unit(std::uint64_t h) noexcept { return static_cast<double>(h >> 11) * 0x1.0p-53; }
/// Uniform in (0, 1): safe to take the logarithm of.
constexpr double unit_open(std::uint64_t h) noexcept {
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}
/// Uniform integer in [0, n) by Lemire's multiply-shift (bias below n/2^64: irrelevant here).
constexpr std::uint64_t below(std::uint64_t h, std::uint64_t n) noexcept {
  return static_cast<std::uint64_t>((static_cast<u128>(h) * n) >> 64);
}

/// A short stream of words under one key: word n is fold(key, n). Local objects only: a stream is
/// created for one (seed, tag, index...) and discarded, so its counter never carries across keys.
class Stream {
 public:
  explicit constexpr Stream(std::uint64_t key) noexcept : key_(key) {}
  std::uint64_t next() noexcept { return fold(key_, counter_++); }
  double uniform_open() noexcept { return unit_open(next()); }
  /// Standard normal by Box–Muller (one of the pair; the other is discarded to stay stateless).
  double normal() noexcept {
    const double u1 = uniform_open(), u2 = uniform_open();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t key_;
  std::uint64_t counter_ = 0;
};

/// log of a Gamma(alpha, 1) variate, alpha > 0. Marsaglia & Tsang (2000) for alpha ≥ 1; for
/// alpha < 1, Gamma(alpha) = Gamma(alpha+1)·U^(1/alpha), kept in log space because U^(1/alpha)
/// underflows to 0 for small alpha (a Dirichlet row of all zeros would then be NaN).
inline double log_gamma_variate(Stream& s, double alpha) noexcept {
  double boost = 0;
  if (alpha < 1) {
    boost = std::log(s.uniform_open()) / alpha;
    alpha += 1;
  }
  const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = s.normal();
    const double v = 1 + c * x;
    if (v <= 0) continue;
    const double v3 = v * v * v;
    const double log_u = std::log(s.uniform_open());
    if (log_u < 0.5 * x * x + d - d * v3 + d * std::log(v3)) return std::log(d) + std::log(v3) + boost;
  }
}

}  // namespace hzp::workloads::rng
