// Seeded uniform test inputs of any element type (fp64, fp32, bf16): what the ring attention tests feed both the ring
// and their references, so each side sees the same values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace hzp::test {

/// n values uniform in [−scale, scale), the same for the same seed.
template <typename T>
std::vector<T> random_values(std::size_t n, double scale, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<T> x(n);
  for (T& e : x) e = static_cast<T>(u(gen));
  return x;
}

}  // namespace hzp::test
