// Tests of the embedding family: the lookup is an exact copy in every dtype, the scatter-add backward
// matches finite differences (fp64) and a double truth (bf16 dout into fp32 gradients), accumulation,
// out-of-range ids rejected with the id, position and vocabulary named, and bad shapes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "embedding/embedding_ref.hpp"
#include "hzp/kernels/embedding.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();
// A vocabulary that is a multiple of nothing, with repeated ids so the backward must sum.
constexpr std::int64_t kVocab = 67, kDim = 5, kTokens = 24;

template <typename T>
void expect_exact_lookup() {
  const auto table = test::random_uniform<T>(kVocab * kDim, 1);
  auto ids = test::random_ints(kTokens, 2, 0, kVocab - 1);
  ids[0] = 0;
  ids[1] = kVocab - 1;  // both ends of the table
  std::vector<T> out(kTokens * kDim);
  embedding_fwd(view(out, {kTokens, kDim}), cview(ids, {kTokens}), cview(table, {kVocab, kDim}), kHost);
  for (std::int64_t t = 0; t < kTokens; ++t)
    EXPECT_EQ(0, std::memcmp(&out[t * kDim], &table[ids[t] * kDim], kDim * sizeof(T))) << "token " << t;
}

TEST(Embedding, ForwardIsAnExactRowCopy) {
  expect_exact_lookup<double>();
  expect_exact_lookup<float>();
  expect_exact_lookup<bf16>();
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  auto table = test::random_uniform<double>(kVocab * kDim, 3);
  auto ids = test::random_ints(kTokens, 4, 0, 9);  // few distinct ids: many repeats
  ids.back() = kVocab - 1;
  const auto dout = test::random_uniform<double>(kTokens * kDim, 5);
  std::vector<double> out(kTokens * kDim), dtable(kVocab * kDim, 123.0);  // garbage: accumulate=false overwrites
  embedding_bwd(view(dtable, {kVocab, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}), false, kHost);
  auto loss = [&] {
    embedding_fwd(view(out, {kTokens, kDim}), cview(ids, {kTokens}), cview(table, {kVocab, kDim}), kHost);
    return test::dot(dout, out);
  };
  EXPECT_TRUE(test::check_gradient("table", table, dtable, loss));
  // Rows no token uses get exactly zero.
  for (std::int64_t j = 0; j < kDim; ++j) EXPECT_EQ(dtable[50 * kDim + j], 0.0);
}

// bf16 output gradients accumulate into fp32 table gradients: each entry is a sum of at most kTokens
// exactly representable terms, so fp32 accumulation is within kTokens·2^-24 of the double sum.
TEST(Embedding, Bf16BackwardIntoFp32MatchesDoubleTruth) {
  const auto ids = test::random_ints(kTokens, 6, 0, 3);
  const auto dout = test::random_uniform<bf16>(kTokens * kDim, 7);
  std::vector<float> dtable(kVocab * kDim);
  embedding_bwd(view(dtable, {kVocab, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}), false, kHost);
  std::vector<double> truth(kVocab * kDim, 0.0);
  const auto dout_d = test::convert<double>(dout);
  for (std::int64_t t = 0; t < kTokens; ++t)
    for (std::int64_t j = 0; j < kDim; ++j) truth[ids[t] * kDim + j] += dout_d[t * kDim + j];
  EXPECT_TRUE(test::all_close(dtable, truth, kTokens * 0x1p-24, kTokens * 0x1p-24));
}

TEST(Embedding, AccumulateAddsAcrossMicroBatches) {
  const auto ids = test::random_ints(kTokens, 8, 0, kVocab - 1);
  const auto dout = test::random_uniform<float>(kTokens * kDim, 9);
  std::vector<float> once(kVocab * kDim), twice(kVocab * kDim);
  embedding_bwd(view(once, {kVocab, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}), false, kHost);
  embedding_bwd(view(twice, {kVocab, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}), false, kHost);
  embedding_bwd(view(twice, {kVocab, kDim}), cview(ids, {kTokens}), cview(dout, {kTokens, kDim}), true, kHost);
  // Same terms, different association ((once + t1) + t2 vs 2·(t1 + t2)): equal to fp32 rounding.
  std::vector<double> expect(once.size());
  for (std::size_t i = 0; i < once.size(); ++i) expect[i] = 2.0 * once[i];
  EXPECT_TRUE(test::all_close(twice, expect, 4 * kTokens * 0x1p-24, 1e-6));
}

TEST(Embedding, SingleTokenAndSingleRowTable) {
  const std::vector<float> table{1.5f, -2.0f, 0.25f};
  const std::vector<std::int32_t> ids{0};
  std::vector<float> out(3), dtable(3);
  embedding_fwd(view(out, {1, 3}), cview(ids, {1}), cview(table, {1, 3}), kHost);
  EXPECT_EQ(out, table);
  embedding_bwd(view(dtable, {1, 3}), cview(ids, {1}), cview(table, {1, 3}), false, kHost);
  EXPECT_EQ(dtable, table);
}

// ------------------------------------------------------------------------------------------------
// Bad ids and shapes.

TEST(Embedding, OutOfRangeIdsNameIdPositionAndVocab) {
  const auto table = test::random_uniform<float>(kVocab * kDim, 10);
  std::vector<std::int32_t> ids(6, 3);
  std::vector<float> out(6 * kDim, 7.0f), dtable(kVocab * kDim, 7.0f);
  ids[3] = static_cast<std::int32_t>(kVocab);
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd(view(out, {6, kDim}), cview(ids, {6}), cview(table, {kVocab, kDim}), kHost); },
      {"embedding_fwd: token id 67 at position 3 is outside the vocabulary [0, 67)"}));
  ids[3] = 3;
  ids[5] = -1;
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_bwd(view(dtable, {kVocab, kDim}), cview(ids, {6}), cview(out, {6, kDim}), false, kHost); },
      {"embedding_bwd: token id -1 at position 5"}));
  // Ids are validated before anything is written.
  for (float v : out) EXPECT_EQ(v, 7.0f);
  for (float v : dtable) EXPECT_EQ(v, 7.0f);
}

TEST(Embedding, RejectsBadShapesAndDtypes) {
  std::vector<float> f(kVocab * kDim);
  std::vector<bf16> h(kVocab * kDim);
  std::vector<std::int32_t> ids(4, 0);
  std::vector<std::int64_t> ids64(4, 0);
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd(view(f, {4, 6}), cview(ids, {4}), cview(f, {10, 5}), kHost); },
      {"embedding_fwd: out has shape [4, 6], expected [4, 5]"}));
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd(view(f, {4, 5}), cview(ids, {2, 2}), cview(f, {10, 5}), kHost); },
      {"embedding_fwd: tokens must be 1-D, got shape [2, 2]"}));
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd(view(f, {4, 5}), cview(ids64, {4}), cview(f, {10, 5}), kHost); },
      {"embedding_fwd: tokens has dtype int64, expected int32"}));
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_fwd(view(f, {0, 5}), cview(ids, {0}), cview(f, {10, 5}), kHost); },
      {"embedding_fwd: tokens = 0 must be positive"}));
  // bf16 output gradients go into an fp32 table gradient (docs/architecture.md, Numerics), never bf16.
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_bwd(view(h, {10, 5}), cview(ids, {4}), cview(h, {4, 5}), false, kHost); },
      {"embedding_bwd: dtable has dtype bf16, expected fp32"}));
  EXPECT_TRUE(test::throws_with(
      [&] { embedding_bwd(view(f, {10, 5}), cview(ids, {4}), cview(f, {3, 5}), false, kHost); },
      {"embedding_bwd: dout has shape [3, 5], expected [4, 5]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        embedding_fwd(view(f, {4, 5}), cview(ids, {4}), cview(f, {10, 5}), StreamRef::wrap(Device::cuda(0), nullptr));
      },
      {"embedding_fwd", "is on cpu but the stream is on cuda:0"}));
}

// The reference and the launcher are one code path on the CPU; keep the reference callable alone
// (the CUDA twin's tests, test_cuda_kernels, compare against the launcher).
TEST(Embedding, ReferenceCallableDirectly) {
  const std::vector<double> table{1, 2, 3, 4};
  const std::vector<std::int32_t> ids{1, 1, 0};
  std::vector<double> out(6), dtable(4);
  embedding_fwd_ref(out.data(), ids.data(), table.data(), 3, 2, 2);
  EXPECT_EQ(out, (std::vector<double>{3, 4, 3, 4, 1, 2}));
  embedding_bwd_ref(dtable.data(), ids.data(), out.data(), 3, 2, 2, false);
  EXPECT_EQ(dtable, (std::vector<double>{1, 2, 6, 8}));
}

}  // namespace
}  // namespace hzp::kernels
