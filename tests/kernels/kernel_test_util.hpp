// Shared utilities for the kernel tests (every family): seeded random fills for double/float/bf16
// vectors, TensorView wrappers over std::vector, element-wise conversion between storage types,
// error metrics with gtest AssertionResults that name the worst element, a central-difference
// gradient checker (in double), and an assertion that a call throws with given message fragments.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hzp/core/dtype.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/tensor.hpp"

// Error messages: throws_with.
#include "../support/throws_with.hpp"

namespace hzp::test {

// ------------------------------------------------------------------------------------------------
// Scalars: every storage type goes through double in the tests (bf16 -> float -> double is exact).

template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16>) return static_cast<double>(v.to_float());
  else return static_cast<double>(v);
}

/// double -> storage type; bf16 rounds to nearest even through float (double -> float -> bf16 can
/// double-round, which is irrelevant for test inputs).
template <typename T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16::from_float(static_cast<float>(v));
  else return static_cast<T>(v);
}

/// Element-wise conversion between storage types (double <-> float <-> bf16).
template <typename To, typename From>
std::vector<To> convert(const std::vector<From>& in) {
  std::vector<To> out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = from_double<To>(to_double(in[i]));
  return out;
}

// ------------------------------------------------------------------------------------------------
// Random inputs. A fixed seed per test makes failures reproducible.

/// n values uniform in [lo, hi), generated in double and rounded to T. Use the same seed to get the
/// "same" input in several precisions (or generate once in double and convert<T>()).
template <typename T>
std::vector<T> random_uniform(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = from_double<T>(dist(gen));
  return v;
}

/// n values from N(mean, stddev), rounded to T.
template <typename T>
std::vector<T> random_normal(std::size_t n, std::uint64_t seed, double mean = 0.0, double stddev = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(mean, stddev);
  std::vector<T> v(n);
  for (auto& x : v) x = from_double<T>(dist(gen));
  return v;
}

/// n integers uniform in [lo, hi] (token ids, labels).
inline std::vector<std::int32_t> random_ints(std::size_t n, std::uint64_t seed, std::int32_t lo, std::int32_t hi) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> dist(lo, hi);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// ------------------------------------------------------------------------------------------------
// Views over test-owned vectors (CPU device).

template <typename T>
TensorView view(std::vector<T>& v, Shape s) {
  HZP_CHECK(static_cast<std::size_t>(s.numel()) <= v.size(), "test view ", to_string(s), " exceeds vector of ",
            v.size());
  return TensorView(v.data(), s, dtype_of_v<T>);
}
template <typename T>
ConstTensorView cview(const std::vector<T>& v, Shape s) {
  HZP_CHECK(static_cast<std::size_t>(s.numel()) <= v.size(), "test view ", to_string(s), " exceeds vector of ",
            v.size());
  return ConstTensorView(v.data(), s, dtype_of_v<T>);
}

/// Σ w_i · y_i in double: the scalar loss L = <dy, f(x)> whose gradient a backward kernel computes
/// when it is handed dy as the output gradient.
template <typename W, typename Y>
double dot(const std::vector<W>& w, const std::vector<Y>& y) {
  HZP_CHECK(w.size() == y.size(), "dot of sizes ", w.size(), " and ", y.size());
  double s = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) s += to_double(w[i]) * to_double(y[i]);
  return s;
}

// ------------------------------------------------------------------------------------------------
// Error metrics.

struct ErrorStats {
  double max_abs = 0.0;      // max_i |a_i - e_i|
  double max_rel = 0.0;      // max_i |a_i - e_i| / max(|e_i|, floor)
  double rel_l2 = 0.0;       // ||a - e||_2 / ||e||_2 (0 when e = 0 and a = e)
  std::size_t worst = 0;     // index of the worst element by the relative metric
};

/// Compares actual to expected; `floor` keeps tiny expected values from dominating max_rel.
template <typename A, typename E>
ErrorStats error_stats(const std::vector<A>& actual, const std::vector<E>& expected, double floor = 1e-30) {
  HZP_CHECK(actual.size() == expected.size(), "error_stats of sizes ", actual.size(), " and ", expected.size());
  ErrorStats st;
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = to_double(actual[i]), e = to_double(expected[i]);
    const double d = std::abs(a - e);
    const double r = d / std::max(std::abs(e), floor);
    st.max_abs = std::max(st.max_abs, d);
    if (r > st.max_rel || std::isnan(r)) {
      st.max_rel = std::isnan(r) ? INFINITY : r;
      st.worst = i;
    }
    num += d * d;
    den += e * e;
  }
  st.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return st;
}

/// Passes when |a_i - e_i| <= atol + rtol·|e_i| for every i (NaN never passes); on failure names the
/// first violating index, its values, and the overall error statistics.
template <typename A, typename E>
::testing::AssertionResult all_close(const std::vector<A>& actual, const std::vector<E>& expected, double rtol,
                                     double atol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs expected " << expected.size();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = to_double(actual[i]), e = to_double(expected[i]);
    if (!(std::abs(a - e) <= atol + rtol * std::abs(e))) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const ErrorStats st = error_stats(actual, expected);
  std::ostringstream os;
  os.precision(10);
  os << bad << " of " << actual.size() << " elements outside atol=" << atol << " + rtol=" << rtol
     << "·|expected|; first at [" << first << "]: actual " << to_double(actual[first]) << " expected "
     << to_double(expected[first]) << "; max_abs=" << st.max_abs << " rel_l2=" << st.rel_l2;
  return ::testing::AssertionFailure() << os.str();
}

/// Passes when ||a - e||_2 / ||e||_2 <= tol: the metric for low-precision outputs, where a single
/// element near zero can legitimately have a large relative error.
template <typename A, typename E>
::testing::AssertionResult rel_l2_close(const std::vector<A>& actual, const std::vector<E>& expected, double tol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs expected " << expected.size();
  const ErrorStats st = error_stats(actual, expected);
  if (st.rel_l2 <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative L2 error " << st.rel_l2 << " > " << tol
                                       << " (max_abs=" << st.max_abs << " at worst-rel index " << st.worst << ")";
}

// ------------------------------------------------------------------------------------------------
// Central differences.

struct FdOptions {
  double h = 1e-5;               // step, scaled by max(1, |x_i|)
  double rtol = 1e-6;            // tolerance relative to max(|analytic_i|, scale)
  std::size_t max_samples = 0;   // 0 = check every element; otherwise a seeded sample of this many
  std::uint64_t seed = 1234;
  /// Gradient entries below this fraction of the largest |analytic| are compared against that
  /// fraction instead of themselves (a structurally tiny entry has no meaningful relative error).
  double scale_fraction = 1e-3;
  /// An absolute floor for that comparison: a gradient that is zero in exact arithmetic (attention's dq and dk
  /// with one visible key) comes out as rounding residue, whose relative error against a zero difference is 1.
  double min_scale = 1e-300;
};

/// Checks an analytical gradient `analytic` (dL/dx_i) of the scalar `loss()` against
/// (L(x + h e_i) - L(x - h e_i)) / 2h, perturbing `x` in place and restoring it afterwards.
/// `loss` must recompute the forward from the current contents of `x` (in double, so the only error
/// is the O(h²) truncation and the O(eps·|L|/h) rounding, both far below 1e-6 relative).
/// `name` labels the input in the failure message.
inline ::testing::AssertionResult check_gradient(std::string_view name, std::vector<double>& x,
                                                 const std::vector<double>& analytic,
                                                 const std::function<double()>& loss, FdOptions opt = {}) {
  if (x.size() != analytic.size())
    return ::testing::AssertionFailure() << name << ": " << x.size() << " inputs but " << analytic.size()
                                         << " gradient entries";
  if (x.empty()) return ::testing::AssertionSuccess();
  std::vector<std::size_t> idx;
  if (opt.max_samples == 0 || opt.max_samples >= x.size()) {
    idx.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) idx[i] = i;
  } else {
    std::mt19937_64 gen(opt.seed);
    std::uniform_int_distribution<std::size_t> dist(0, x.size() - 1);
    idx.push_back(0);
    idx.push_back(x.size() - 1);  // the ends catch off-by-one layouts
    while (idx.size() < opt.max_samples) idx.push_back(dist(gen));
  }
  double gmax = 0.0;
  for (double g : analytic) gmax = std::max(gmax, std::abs(g));
  const double scale = std::max(gmax * opt.scale_fraction, opt.min_scale);

  double worst = 0.0;
  std::size_t worst_i = 0;
  double worst_fd = 0.0;
  for (std::size_t i : idx) {
    const double x0 = x[i];
    const double h = opt.h * std::max(1.0, std::abs(x0));
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (2.0 * h);
    const double err = std::abs(fd - analytic[i]) / std::max(std::abs(analytic[i]), scale);
    if (err > worst || std::isnan(err)) {
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
      worst_fd = fd;
    }
  }
  if (worst <= opt.rtol) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(12);
  os << name << ": finite difference disagrees at [" << worst_i << "]: analytic " << analytic[worst_i]
     << ", central difference " << worst_fd << ", relative error " << worst << " > " << opt.rtol << " ("
     << idx.size() << " of " << x.size() << " elements checked)";
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace hzp::test
