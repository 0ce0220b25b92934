// Tests of the vocabulary-parallel embedding and cross-entropy (kernels/vocab_parallel) against the
// independent full-vocabulary kernels (embedding_fwd/bwd, cross_entropy_fwd/bwd): [7, 37] logits and a
// [37, 5] table are split into tp = 1..4 slices, even and uneven (19+18, 13+12+12, 1+35+1, ...), the
// per-slice statistics are combined here as the model's all-reduces would (max, then sums), and the
// losses, their sum, the concatenated dlogits, the summed lookups and the gradient rows must equal those
// of the full kernels on the whole vocabulary, in fp64, fp32 and bf16. Also: what each slice's statistics
// hold, large logits, aliasing and the error messages. The CUDA twin is tested against these CPU launchers
// in test_cuda_vocab_parallel.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/embedding.hpp"
#include "hzp/kernels/scalar.hpp"
#include "hzp/kernels/vocab_parallel.hpp"
#include "kernel_test_util.hpp"
#include "vocab_parallel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::columns;
using test::convert;
using test::cview;
using test::describe;
using test::rows_of;
using test::Slice;
using test::slices_of;
using test::view;
using test::vocab_parallel_ce;

const StreamRef kHost = StreamRef::host();
// Odd sizes that no split divides evenly except tp = 1.
constexpr std::int64_t kN = 7, kV = 37;

/// tp = 1..4 as a model cuts 37 rows (the remainder to the first ranks), then lopsided splits: one-row
/// slices at both ends, and a one-row slice in the middle.
std::vector<std::vector<Slice>> splits() {
  return {slices_of({37}),         slices_of({19, 18}),    slices_of({13, 12, 12}),
          slices_of({10, 9, 9, 9}), slices_of({1, 35, 1}), slices_of({20, 1, 16})};
}

/// Random logits, targets with the first and the last vocabulary id and two ignored rows.
template <typename T>
std::vector<T> test_logits() {
  return convert<T>(test::random_normal<double>(kN * kV, 11, 0.0, 3.0));
}
std::vector<std::int32_t> test_targets() {
  auto t = test::random_ints(kN, 12, 1, kV - 2);
  t[0] = 0;
  t[1] = kV - 1;
  t[3] = -1;
  t[5] = -1;
  return t;
}

struct Tolerances {
  double loss_rtol, loss_atol, grad_rtol, grad_atol;
};

template <typename T>
void expect_split_matches_full_cross_entropy(Tolerances tol) {
  const auto logits = test_logits<T>();
  const auto targets = test_targets();
  const CrossEntropyGrad g{-1, 11.0, 0.7};  // a global-batch normaliser and a non-unit upstream gradient
  std::vector<acc_t<T>> losses(kN);
  const CrossEntropyResult full =
      cross_entropy_fwd(view(losses, {kN}), cview(logits, {kN, kV}), cview(targets, {kN}), -1, kHost);
  std::vector<T> dlogits(logits.size());
  cross_entropy_bwd(view(dlogits, {kN, kV}), cview(logits, {kN, kV}), cview(targets, {kN}), g, kHost);
  ASSERT_EQ(full.n_valid, kN - 2);

  for (const auto& split : splits()) {
    SCOPED_TRACE(describe(split));
    const auto p = vocab_parallel_ce(logits, targets, kV, split, g);
    EXPECT_EQ(p.result.n_valid, full.n_valid);
    EXPECT_TRUE(test::all_close(p.losses, losses, tol.loss_rtol, tol.loss_atol));
    EXPECT_NEAR(p.result.loss_sum, full.loss_sum, tol.loss_rtol * std::abs(full.loss_sum) + kN * tol.loss_atol);
    EXPECT_TRUE(test::all_close(p.dlogits, dlogits, tol.grad_rtol, tol.grad_atol));
    for (std::int64_t n : {3, 5}) {
      EXPECT_EQ(p.losses[n], 0.0) << "ignored row " << n;
      for (std::int64_t j = 0; j < kV; ++j)
        ASSERT_EQ(test::to_double(p.dlogits[n * kV + j]), 0.0) << "ignored row " << n << ", column " << j;
    }
  }
}

TEST(VocabParallelCrossEntropy, SplitsMatchTheFullVocabularyKernelInDouble) {
  expect_split_matches_full_cross_entropy<double>({1e-12, 0.0, 1e-12, 1e-18});
}

TEST(VocabParallelCrossEntropy, SplitsMatchTheFullVocabularyKernelInFp32) {
  // The statistics are stored in fp32 (one rounding of each slice's fp64 exp sum, one per sum over the
  // ranks): a few 1e-8 relative in log Σ, the losses' and probabilities' only difference.
  expect_split_matches_full_cross_entropy<float>({1e-6, 0.0, 1e-6, 1e-9});
}

TEST(VocabParallelCrossEntropy, SplitsMatchTheFullVocabularyKernelInBf16) {
  // Losses as fp32's (bf16 logits, fp32 statistics); gradients may flip one bf16 rounding (2^-7 at most).
  expect_split_matches_full_cross_entropy<bf16>({1e-6, 0.0, 1.0 / 128, 1e-12});
}

TEST(VocabParallelCrossEntropy, OneSliceReproducesTheFullKernelBitwiseInDouble) {
  // With a single slice every operation is the full kernel's, in the same order (its one 1024-wide block
  // covers the row; the fp64 statistics are stored without rounding), so nothing may differ at all.
  const auto logits = test_logits<double>();
  const auto targets = test_targets();
  const CrossEntropyGrad g{-1, 5.0, 1.0};
  std::vector<double> losses(kN), dlogits(logits.size());
  const auto full = cross_entropy_fwd(view(losses, {kN}), cview(logits, {kN, kV}), cview(targets, {kN}), -1, kHost);
  cross_entropy_bwd(view(dlogits, {kN, kV}), cview(logits, {kN, kV}), cview(targets, {kN}), g, kHost);
  const auto p = vocab_parallel_ce(logits, targets, kV, slices_of({kV}), g);
  EXPECT_EQ(p.losses, losses);
  EXPECT_EQ(p.result.loss_sum, full.loss_sum);
  EXPECT_EQ(p.dlogits, dlogits);
}

TEST(VocabParallelCrossEntropy, LocalStatisticsSeeOnlyTheirSlice) {
  const auto logits = test_logits<double>();
  auto targets = test_targets();
  targets[6] = 1000;  // past the vocabulary: from a slice, just another rank's id (not checked, never found)
  for (const Slice s : slices_of({13, 12, 12})) {
    SCOPED_TRACE(::testing::Message() << "slice [" << s.begin << ", " << s.begin + s.size << ")");
    const auto local = columns(logits, kN, kV, s);
    std::vector<double> row_max(kN, 99.0), target_logit(kN, 99.0);
    vocab_parallel_ce_local_stats(view(row_max, {kN}), view(target_logit, {kN}), cview(local, {kN, s.size}),
                                  cview(targets, {kN}), s.begin, -1, kHost);
    for (std::int64_t n = 0; n < kN; ++n) {
      const auto row = local.begin() + n * s.size;
      // Ignored rows get their maximum too: the all-reduce(max) runs over every row.
      EXPECT_EQ(row_max[n], *std::max_element(row, row + s.size)) << "row " << n;
      const std::int32_t t = targets[n];
      const bool here = t != -1 && t >= s.begin && t < s.begin + s.size;
      EXPECT_EQ(target_logit[n], here ? logits[n * kV + t] : 0.0) << "row " << n << ", target " << t;
    }
  }
}

TEST(VocabParallelCrossEntropy, LargeLogitsNeitherOverflowNorLosePrecision) {
  // As the full kernel's test: rows at −L with k entries at +L (L = 10240, exact in bf16), so a naive
  // Σ exp(x) overflows even in fp64; the global maximum keeps every term <= 1 on every rank. Targets in
  // the last slice (loss ln k for one at +L) and the first (2L + ln k), ignore_index −100.
  const double L = 10240.0;
  std::vector<double> base(3 * kV, -L);
  base[0 * kV + 30] = L;
  for (std::int64_t j : {2, 15, 33}) base[1 * kV + j] = L;
  base[2 * kV + 20] = L;
  const std::vector<std::int32_t> targets{30, 5, -100};
  const double want[] = {0.0, 2 * L + std::log(3.0), 0.0};
  const CrossEntropyGrad g{-100, 2.0, 1.0};
  const auto check = [&](auto tag) {
    using T = decltype(tag);
    const auto logits = convert<T>(base);
    std::vector<T> full_d(logits.size());
    cross_entropy_bwd(view(full_d, {3, kV}), cview(logits, {3, kV}), cview(targets, {3}), g, kHost);
    const auto p = vocab_parallel_ce(logits, targets, kV, slices_of({13, 12, 12}), g);
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(p.losses[r], want[r], 1e-6 * std::max(1.0, want[r])) << "row " << r;
    EXPECT_EQ(p.result.n_valid, 2);
    EXPECT_TRUE(test::all_close(p.dlogits, full_d, 1e-6, 1e-12));
    EXPECT_NEAR(test::to_double(p.dlogits[1 * kV + 15]), 1.0 / 3.0 / 2.0, 1e-3);
  };
  check(double{});
  check(float{});
  check(bf16{});
}

TEST(VocabParallelCrossEntropy, BackwardInPlaceEqualsOutOfPlace) {
  const auto check = [](auto tag) {
    using T = decltype(tag);
    const auto logits = test_logits<T>();
    const auto targets = test_targets();
    const CrossEntropyGrad g{-1, 5.0, 1.0};
    const auto p = vocab_parallel_ce(logits, targets, kV, slices_of({13, 12, 12}), g);
    const Slice s{13, 12};  // the middle slice: neither target 0 nor target 36 is in it
    auto inplace = columns(logits, kN, kV, s);
    vocab_parallel_ce_bwd(view(inplace, {kN, s.size}), cview(inplace, {kN, s.size}), cview(targets, {kN}), s.begin,
                          cview(p.global_max, {kN}), cview(p.global_sum_exp, {kN}), g, kHost);
    const auto want = columns(p.dlogits, kN, kV, s);
    EXPECT_EQ(std::memcmp(inplace.data(), want.data(), want.size() * sizeof(T)), 0);
    // And a slice holding targets (row 0's id 0): the target logit is read before the row is overwritten.
    const Slice first{0, 13};
    auto inplace0 = columns(logits, kN, kV, first);
    vocab_parallel_ce_bwd(view(inplace0, {kN, first.size}), cview(inplace0, {kN, first.size}), cview(targets, {kN}),
                          first.begin, cview(p.global_max, {kN}), cview(p.global_sum_exp, {kN}), g, kHost);
    const auto want0 = columns(p.dlogits, kN, kV, first);
    EXPECT_EQ(std::memcmp(inplace0.data(), want0.data(), want0.size() * sizeof(T)), 0);
    EXPECT_LT(test::to_double(inplace0[0]), 0.0) << "row 0's target column has p − 1 < 0";
  };
  check(float{});
  check(bf16{});
}

// ------------------------------------------------------------------------------------------------
// Embedding: each rank's rows of the table.

constexpr std::int64_t kDim = 5, kTokens = 24;

std::vector<std::int32_t> embedding_ids() {
  auto ids = test::random_ints(kTokens, 22, 0, kV - 1);
  ids[0] = 0;
  ids[1] = kV - 1;  // both ends of the vocabulary
  ids[2] = ids[3] = ids[4] = 12;  // repeats, on the last row of the 13-row slice
  ids[5] = ids[6] = 13;           // and on the first row of the next one
  return ids;
}

template <typename T>
void expect_lookup_slices_sum_to_full_lookup() {
  const auto table = test::random_uniform<T>(kV * kDim, 21);
  const auto ids = embedding_ids();
  std::vector<T> full(kTokens * kDim);
  embedding_fwd(view(full, {kTokens, kDim}), cview(ids, {kTokens}), cview(table, {kV, kDim}), kHost);
  for (const auto& split : splits()) {
    SCOPED_TRACE(describe(split));
    std::vector<double> sum(full.size(), 0.0);
    for (const Slice& s : split) {
      const auto rows = rows_of(table, kDim, s);
      std::vector<T> out(full.size(), test::from_double<T>(99.0));  // every element must be overwritten
      embedding_fwd_vocab_range(view(out, {kTokens, kDim}), cview(ids, {kTokens}), cview(rows, {s.size, kDim}),
                                s.begin, kHost);
      for (std::int64_t t = 0; t < kTokens; ++t) {
        const bool here = ids[t] >= s.begin && ids[t] < s.begin + s.size;
        for (std::int64_t j = 0; j < kDim; ++j) {
          const double v = test::to_double(out[t * kDim + j]);
          ASSERT_EQ(v, here ? test::to_double(full[t * kDim + j]) : 0.0) << "token " << t << ", column " << j;
          sum[t * kDim + j] += v;  // the model's all-reduce(sum): exactly one rank adds a non-zero
        }
      }
    }
    EXPECT_EQ(sum, convert<double>(full));
  }
}

TEST(VocabParallelEmbedding, SlicesSumToTheFullLookup) {
  expect_lookup_slices_sum_to_full_lookup<double>();
  expect_lookup_slices_sum_to_full_lookup<float>();
  expect_lookup_slices_sum_to_full_lookup<bf16>();
}

template <typename T>
void expect_backward_slices_equal_full_rows() {
  using G = grad_t<T>;
  const auto ids = embedding_ids();
  const auto dout = test::random_uniform<T>(kTokens * kDim, 23);
  const auto start = test::random_uniform<G>(kV * kDim, 24);  // accumulate=false overwrites it, true adds to it
  for (bool accumulate : {false, true}) {
    auto full = start;
    embedding_bwd(view(full, {kV, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}), accumulate, kHost);
    for (const auto& split : splits()) {
      SCOPED_TRACE(describe(split));
      for (const Slice& s : split) {
        auto rows = rows_of(start, kDim, s);
        embedding_bwd_vocab_range(view(rows, {s.size, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}),
                                  s.begin, accumulate, kHost);
        // Bitwise: the same additions in the same (token) order.
        EXPECT_EQ(rows, rows_of(full, kDim, s)) << "accumulate=" << accumulate << ", slice at " << s.begin;
      }
    }
  }
}

TEST(VocabParallelEmbedding, BackwardSlicesEqualTheFullGradientRows) {
  expect_backward_slices_equal_full_rows<double>();
  expect_backward_slices_equal_full_rows<float>();
  expect_backward_slices_equal_full_rows<bf16>();  // bf16 dout into fp32 rows
}

// ------------------------------------------------------------------------------------------------
// Bad arguments.

TEST(VocabParallel, RejectsBadArgumentsNamingTheValue) {
  const auto table = test::random_uniform<float>(12 * kDim, 30);
  std::vector<std::int32_t> ids(6, 3);
  std::vector<float> out(6 * kDim, 7.0f), drows(12 * kDim, 7.0f);
  std::vector<bf16> drows16(12 * kDim);
  ids[3] = -2;
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd_vocab_range(view(out, {6, kDim}), cview(ids, {6}), cview(table, {12, kDim}), 13, kHost); },
      {"embedding_fwd_vocab_range: token id -2 at position 3 is negative"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        embedding_bwd_vocab_range(view(drows, {12, kDim}), cview(ids, {6}), cview(out, {6, kDim}), 13, false, kHost);
      },
      {"embedding_bwd_vocab_range: token id -2 at position 3 is negative"}));
  for (float v : out) ASSERT_EQ(v, 7.0f) << "ids are checked before anything is written";
  for (float v : drows) ASSERT_EQ(v, 7.0f) << "ids are checked before anything is written";
  ids[3] = 3;
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd_vocab_range(view(out, {6, kDim}), cview(ids, {6}), cview(table, {12, kDim}), -1, kHost); },
      {"embedding_fwd_vocab_range: vocab_begin = -1 must be non-negative"}));
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd_vocab_range(view(out, {6, 4}), cview(ids, {6}), cview(table, {12, kDim}), 0, kHost); },
      {"embedding_fwd_vocab_range: out has shape [6, 4], expected [6, 5]"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        embedding_bwd_vocab_range(view(drows16, {12, kDim}), cview(ids, {6}), cview(drows16, {6, kDim}), 0, false,
                                  kHost);
      },
      {"embedding_bwd_vocab_range: dtable_rows has dtype bf16, expected fp32"}));

  const std::int64_t Vl = 13;
  const auto logits = test::random_uniform<float>(kN * Vl, 31);
  auto targets = test::random_ints(kN, 32, 0, 36);
  std::vector<float> a(kN), b(kN), c(kN), d(kN * Vl);
  std::vector<double> a64(kN);
  std::vector<bf16> a16(kN);
  targets[4] = -5;
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_local_stats(view(a, {kN}), view(b, {kN}), cview(logits, {kN, Vl}), cview(targets, {kN}), 0,
                                      -1, kHost);
      },
      {"vocab_parallel_ce_local_stats: targets[4] = -5 is negative and is not ignore_index = -1"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_loss(view(a, {kN}), cview(a, {kN}), cview(b, {kN}), cview(c, {kN}), cview(targets, {kN}), -1,
                               kHost);
      },
      {"vocab_parallel_ce_loss: targets[4] = -5"}));
  targets[4] = -1;
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_local_stats(view(a64, {kN}), view(b, {kN}), cview(logits, {kN, Vl}), cview(targets, {kN}),
                                      0, -1, kHost);
      },
      {"vocab_parallel_ce_local_stats: row_max has dtype fp64, expected fp32"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_local_stats(view(a, {kN}), view(b, {kN}), cview(logits, {kN, Vl}), cview(targets, {kN}), -4,
                                      -1, kHost);
      },
      {"vocab_parallel_ce_local_stats: vocab_begin = -4"}));
  EXPECT_TRUE(test::throws_with(
      [&] { vocab_parallel_ce_sum_exp(view(a, {kN}), cview(logits, {kN, Vl}), cview(b, {kN - 1}), kHost); },
      {"vocab_parallel_ce_sum_exp: global_max has shape [6], expected [7]"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_loss(view(a16, {kN}), cview(a16, {kN}), cview(a16, {kN}), cview(a16, {kN}),
                               cview(targets, {kN}), -1, kHost);
      },
      {"vocab_parallel_ce_loss: global_max has dtype bf16, expected fp32 or fp64"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_loss(view(a64, {kN}), cview(a, {kN}), cview(b, {kN}), cview(c, {kN}), cview(targets, {kN}),
                               -1, kHost);
      },
      {"vocab_parallel_ce_loss: losses has dtype fp64, expected fp32"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_bwd(view(d, {kN, Vl - 1}), cview(logits, {kN, Vl}), cview(targets, {kN}), 0, cview(a, {kN}),
                              cview(b, {kN}), CrossEntropyGrad{-1, 3.0, 1.0}, kHost);
      },
      {"vocab_parallel_ce_bwd: dlogits has shape [7, 12], expected [7, 13]"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        vocab_parallel_ce_bwd(view(d, {kN, Vl}), cview(logits, {kN, Vl}), cview(targets, {kN}), 0, cview(a, {kN}),
                              cview(b, {kN}), CrossEntropyGrad{}, kHost);
      },
      {"vocab_parallel_ce_bwd: normaliser = 0", "global batch"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        const Device gpu = Device::cuda(0);
        vocab_parallel_ce_sum_exp(TensorView(a.data(), Shape{kN}, DType::f32, gpu),
                                  ConstTensorView(logits.data(), Shape{kN, Vl}, DType::f32, gpu),
                                  ConstTensorView(b.data(), Shape{kN}, DType::f32, Device::cpu()),
                                  StreamRef::wrap(gpu, nullptr));
      },
      {"vocab_parallel_ce_sum_exp", "global_max", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
