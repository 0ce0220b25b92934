// Helpers shared by the vocabulary-parallel tests (test_vocab_parallel.cpp on the CPU and its CUDA twin
// test_cuda_vocab_parallel.cpp): a rank's slice of the vocabulary and splits of it into consecutive
// slices, a description of a split for SCOPED_TRACE, a rank's columns (logits) or rows (table) of a
// row-major matrix and the write-back of its columns, and the vocabulary-parallel cross-entropy run on the
// host launchers, each slice's statistics combined here as the model's all-reduces would (max, then sums).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hzp/core/stream.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/scalar.hpp"
#include "hzp/kernels/vocab_parallel.hpp"
#include "kernel_test_util.hpp"

namespace hzp::test {

/// One rank's share of the vocabulary: global ids [begin, begin + size).
struct Slice {
  std::int64_t begin = 0, size = 0;
};

/// Consecutive slices of the given sizes from id 0.
inline std::vector<Slice> slices_of(std::initializer_list<std::int64_t> sizes) {
  std::vector<Slice> out;
  std::int64_t begin = 0;
  for (std::int64_t n : sizes) {
    out.push_back({begin, n});
    begin += n;
  }
  return out;
}

inline std::string describe(const std::vector<Slice>& split) {
  std::ostringstream os;
  os << "tp=" << split.size() << " sizes";
  for (const Slice& s : split) os << ' ' << s.size;
  return os.str();
}

/// Columns [s.begin, s.begin + s.size) of a row-major [rows, cols] matrix: one rank's logits.
template <typename T>
std::vector<T> columns(const std::vector<T>& m, std::int64_t rows, std::int64_t cols, Slice s) {
  std::vector<T> out(static_cast<std::size_t>(rows * s.size));
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(m.begin() + r * cols + s.begin, s.size, out.begin() + r * s.size);
  return out;
}

/// Writes a rank's [rows, s.size] block into its columns of a [rows, cols] matrix.
template <typename T>
void put_columns(std::vector<T>& m, std::int64_t cols, const std::vector<T>& block, Slice s) {
  const std::int64_t rows = static_cast<std::int64_t>(block.size()) / s.size;
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(block.begin() + r * s.size, s.size, m.begin() + r * cols + s.begin);
}

/// Rows [s.begin, s.begin + s.size) of a row-major [rows, cols] matrix: one rank's table rows.
template <typename T>
std::vector<T> rows_of(const std::vector<T>& m, std::int64_t cols, Slice s) {
  return std::vector<T>(m.begin() + s.begin * cols, m.begin() + (s.begin + s.size) * cols);
}

// ------------------------------------------------------------------------------------------------
// Cross-entropy: each rank's kernels on its columns, combined here where the model all-reduces.

template <typename T>
struct ParallelCe {
  std::vector<kernels::acc_t<T>> global_max, global_sum_exp, global_target_logit, losses;
  kernels::CrossEntropyResult result;
  std::vector<T> dlogits;  // [N, V]: the ranks' slices side by side
};

template <typename T>
ParallelCe<T> vocab_parallel_ce(const std::vector<T>& logits, const std::vector<std::int32_t>& targets,
                                std::int64_t V, const std::vector<Slice>& split, const kernels::CrossEntropyGrad& g) {
  using S = kernels::acc_t<T>;
  const StreamRef host = StreamRef::host();
  const std::int64_t N = static_cast<std::int64_t>(targets.size());
  const auto tg = cview(targets, {N});
  ParallelCe<T> p;
  p.global_max.assign(targets.size(), -std::numeric_limits<S>::infinity());
  p.global_sum_exp.assign(targets.size(), S(0));
  p.global_target_logit.assign(targets.size(), S(0));
  std::vector<std::vector<T>> local;
  for (const Slice& s : split) {
    local.push_back(columns(logits, N, V, s));
    std::vector<S> row_max(targets.size()), target_logit(targets.size());
    kernels::vocab_parallel_ce_local_stats(view(row_max, {N}), view(target_logit, {N}),
                                           cview(local.back(), {N, s.size}), tg, s.begin, g.ignore_index, host);
    for (std::size_t n = 0; n < targets.size(); ++n) {
      p.global_max[n] = std::max(p.global_max[n], row_max[n]);  // all-reduce(max)
      p.global_target_logit[n] += target_logit[n];                // all-reduce(sum)
    }
  }
  for (std::size_t i = 0; i < split.size(); ++i) {
    std::vector<S> sum_exp(targets.size());
    kernels::vocab_parallel_ce_sum_exp(view(sum_exp, {N}), cview(local[i], {N, split[i].size}),
                                       cview(p.global_max, {N}), host);
    for (std::size_t n = 0; n < targets.size(); ++n) p.global_sum_exp[n] += sum_exp[n];  // all-reduce(sum)
  }
  p.losses.resize(targets.size());
  p.result = kernels::vocab_parallel_ce_loss(view(p.losses, {N}), cview(p.global_max, {N}),
                                             cview(p.global_sum_exp, {N}), cview(p.global_target_logit, {N}), tg,
                                             g.ignore_index, host);
  p.dlogits.resize(logits.size());
  for (std::size_t i = 0; i < split.size(); ++i) {
    const Slice s = split[i];
    std::vector<T> d(local[i].size());
    kernels::vocab_parallel_ce_bwd(view(d, {N, s.size}), cview(local[i], {N, s.size}), tg, s.begin,
                                   cview(p.global_max, {N}), cview(p.global_sum_exp, {N}), g, host);
    put_columns(p.dlogits, V, d, s);
  }
  return p;
}

}  // namespace hzp::test
