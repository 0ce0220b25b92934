// The MoE layer's test problem and its plain fp64 reference, shared by the single-rank tests (test_moe.cpp) and the
// expert-parallel ones (test_moe_expert_parallel.cpp): random inputs and weights of a small layer, and the routed
// experts' output computed by a loop over tokens and their chosen experts, independent of the library's code.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "hzp/core/tensor.hpp"
#include "hzp/workloads/moe.hpp"

namespace hzp::test {

using workloads::MoeBalance;
using workloads::MoeConfig;
using workloads::RouterScore;

struct Problem {
  MoeConfig c;
  std::int64_t N = 10, d = 6;
  std::vector<double> h, router, wg, wu, wd, bias;
};

inline Problem make_problem(RouterScore score, MoeBalance balance, double capacity, bool with_bias, unsigned seed) {
  Problem p;
  p.c.experts = 4;
  p.c.top_k = 2;
  p.c.expert_ffn = 5;
  p.c.router_score = score;
  p.c.balance = balance;
  p.c.capacity_factor = capacity;
  p.c.aux_loss_coef = 0.3;  // large, so a wrong auxiliary gradient shows
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> nd(0.0, 0.7);
  auto fill = [&](std::vector<double>& v, std::int64_t n) {
    v.resize(static_cast<std::size_t>(n));
    for (double& x : v) x = nd(gen);
  };
  const std::int64_t E = p.c.experts, F = p.c.expert_ffn;
  fill(p.h, p.N * p.d);
  fill(p.router, E * p.d);
  fill(p.wg, E * F * p.d);
  fill(p.wu, E * F * p.d);
  fill(p.wd, E * p.d * F);
  if (with_bias) p.bias = {0.3, -0.2, 0.0, 0.15};
  return p;
}

inline ConstTensorView view(const std::vector<double>& v, Shape s) { return ConstTensorView(v.data(), s, DType::f64); }
inline TensorView view(std::vector<double>& v, Shape s) { return TensorView(v.data(), s, DType::f64); }

inline workloads::MoeExpertWeights weights(const Problem& p) {
  const std::int64_t E = p.c.experts, F = p.c.expert_ffn;
  return {view(p.router, Shape{E, p.d}), view(p.wg, Shape{E, F, p.d}), view(p.wu, Shape{E, F, p.d}),
          view(p.wd, Shape{E, p.d, F})};
}

// The plain reference: every token, its k best experts by score + bias (ties to the lower index), gates over the
// chosen scores, capacity admitted token by token in choice order, each chosen expert's SwiGLU summed.
inline std::vector<double> reference_forward(const Problem& p, std::int64_t* dropped = nullptr) {
  const std::int64_t E = p.c.experts, F = p.c.expert_ffn, k = p.c.top_k, d = p.d;
  const std::int64_t cap = p.c.capacity_factor > 0
                               ? static_cast<std::int64_t>(std::ceil(p.c.capacity_factor * p.N * k / E))
                               : p.N * k;
  std::vector<std::int64_t> used(static_cast<std::size_t>(E), 0);
  std::vector<double> y(static_cast<std::size_t>(p.N * d), 0.0);
  if (dropped) *dropped = 0;
  for (std::int64_t t = 0; t < p.N; ++t) {
    const double* x = &p.h[static_cast<std::size_t>(t * d)];
    std::vector<double> z(static_cast<std::size_t>(E)), s(static_cast<std::size_t>(E));
    for (std::int64_t e = 0; e < E; ++e)
      for (std::int64_t i = 0; i < d; ++i) z[e] += p.router[static_cast<std::size_t>(e * d + i)] * x[i];
    double zsum = 0;
    for (std::int64_t e = 0; e < E; ++e) zsum += std::exp(z[e]);
    for (std::int64_t e = 0; e < E; ++e)
      s[e] = p.c.router_score == RouterScore::sigmoid ? 1 / (1 + std::exp(-z[e])) : std::exp(z[e]) / zsum;
    std::vector<std::int64_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      const double ba = p.bias.empty() ? 0 : p.bias[a], bb = p.bias.empty() ? 0 : p.bias[b];
      return s[a] + ba > s[b] + bb;
    });
    double chosen = 0;
    for (std::int64_t j = 0; j < k; ++j) chosen += s[order[j]];
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t e = order[j];
      if (used[e] >= cap) {
        if (dropped) ++*dropped;
        continue;
      }
      ++used[e];
      const double gate = s[e] / chosen;
      std::vector<double> a(static_cast<std::size_t>(F));
      for (std::int64_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (std::int64_t i = 0; i < d; ++i) {
          g += p.wg[static_cast<std::size_t>((e * F + f) * d + i)] * x[i];
          u += p.wu[static_cast<std::size_t>((e * F + f) * d + i)] * x[i];
        }
        a[f] = g / (1 + std::exp(-g)) * u;
      }
      for (std::int64_t i = 0; i < d; ++i) {
        double o = 0;
        for (std::int64_t f = 0; f < F; ++f) o += p.wd[static_cast<std::size_t>((e * d + i) * F + f)] * a[f];
        y[static_cast<std::size_t>(t * d + i)] += gate * o;
      }
    }
  }
  return y;
}

}  // namespace hzp::test
