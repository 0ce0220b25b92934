// Document packing's boundaries: determinism, the log-normal's mean against its closed form, the pair count against
// a direct count, and the errors bad keys get.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "hzp/core/error.hpp"
#include "hzp/workloads/data/document_packing.hpp"

namespace hzp::workloads {
namespace {

DocumentPacking documents(double mean, double sigma, std::uint64_t seed = 7) {
  return DocumentPacking{.kind = PackingKind::documents, .mean_tokens = mean, .sigma = sigma, .seed = seed};
}

TEST(DocumentPacking, NoneIsOneDocument) {
  const DocumentPacking none;
  EXPECT_EQ(none.starts(5, 4096), (std::vector<std::int32_t>{0}));
}

TEST(DocumentPacking, StartsAscendBeginAtZeroAndStayInsideTheSequence) {
  const DocumentPacking p = documents(300, 1.0);
  for (std::int64_t i = 0; i < 200; ++i) {
    const auto s = p.starts(i, 4096);
    ASSERT_FALSE(s.empty());
    EXPECT_EQ(s.front(), 0);
    for (std::size_t d = 1; d < s.size(); ++d) EXPECT_LT(s[d - 1], s[d]) << "sample " << i;
    EXPECT_LT(s.back(), 4096);
  }
}

TEST(DocumentPacking, DeterministicInSeedAndIndexAlone) {
  const DocumentPacking p = documents(300, 1.0);
  const auto a = p.starts(17, 4096);
  (void)p.starts(3, 4096);  // another sample in between changes nothing
  EXPECT_EQ(p.starts(17, 4096), a);
  EXPECT_NE(p.starts(18, 4096), a);
  EXPECT_NE(documents(300, 1.0, 8).starts(17, 4096), a);
}

// Whole documents (every one but the first and the last, which the sequence cuts) have the log-normal's mean
// E[L] = exp(μ + σ²/2) = mean_tokens, up to rounding to whole tokens (±0.5) and sampling error (σ_L / √n).
TEST(DocumentPacking, WholeDocumentsHaveTheStatedMean) {
  const double mean = 200, sigma = 0.8;
  const DocumentPacking p = documents(mean, sigma);
  double sum = 0, n = 0;
  for (std::int64_t i = 0; i < 400; ++i) {
    const auto s = p.starts(i, 8192);
    for (std::size_t d = 1; d + 1 < s.size(); ++d) {
      sum += s[d + 1] - s[d];
      n += 1;
    }
  }
  ASSERT_GT(n, 5000);
  const double sd = mean * std::sqrt(std::exp(sigma * sigma) - 1);
  EXPECT_NEAR(sum / n, mean, 5 * sd / std::sqrt(n) + 0.5);
}

TEST(DocumentPacking, SigmaZeroGivesEqualDocuments) {
  const auto s = documents(100, 0).starts(4, 1024);
  for (std::size_t d = 2; d < s.size(); ++d) EXPECT_EQ(s[d] - s[d - 1], 100);
}

TEST(DocumentPacking, FirstPositionsAndPairsAgreeWithADirectCount) {
  const std::vector<std::int32_t> starts{0, 5, 6, 20};
  const std::int64_t T = 32;
  std::vector<std::int32_t> first(T);
  document_first_positions(starts, T, first);
  EXPECT_EQ(first[0], 0);
  EXPECT_EQ(first[4], 0);
  EXPECT_EQ(first[5], 5);
  EXPECT_EQ(first[6], 6);
  EXPECT_EQ(first[19], 6);
  EXPECT_EQ(first[31], 20);
  for (std::int64_t b = 0; b <= T; b += 3)
    for (std::int64_t e = b; e <= T; e += 5) {
      double direct = 0;
      for (std::int64_t t = b; t < e; ++t)
        for (std::int64_t k = 0; k <= t; ++k) direct += k >= first[t] ? 1 : 0;
      EXPECT_DOUBLE_EQ(document_causal_pairs(starts, T, b, e), direct) << "rows [" << b << ", " << e << ")";
    }
  EXPECT_DOUBLE_EQ(document_causal_pairs(std::vector<std::int32_t>{0}, T, 0, T), T * (T + 1) / 2.0);
}

TEST(DocumentPacking, BadStartsAreRefused) {
  std::vector<std::int32_t> out(8);
  EXPECT_THROW(document_first_positions(std::vector<std::int32_t>{1, 4}, 8, out), PreconditionError);
  EXPECT_THROW(document_first_positions(std::vector<std::int32_t>{0, 4, 4}, 8, out), PreconditionError);
  EXPECT_THROW(document_first_positions(std::vector<std::int32_t>{0, 8}, 8, out), PreconditionError);
}

TEST(DocumentPacking, BadKeysNameTheKeyAndTheFix) {
  try {
    documents(0.5, 7).validate();
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("data.documents.mean_tokens=0.5"), std::string::npos) << m;
    EXPECT_NE(m.find("data.documents.sigma=7"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_packing_kind("docs"), ConfigError);
  EXPECT_EQ(parse_packing_kind("documents"), PackingKind::documents);
}

}  // namespace
}  // namespace hzp::workloads
