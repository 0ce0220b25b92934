// The collective benchmark's pure parts (serial): the sweep sizes, the verification pattern (exact in
// fp32 and bf16, not degenerate), and that the table's row format is what CTest's #wrong check parses.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "collective_bench.hpp"
#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

CollectiveBenchOptions sweep(std::size_t lo, std::size_t hi, double f, DType t = DType::f32) {
  CollectiveBenchOptions o;
  o.min_bytes = lo;
  o.max_bytes = hi;
  o.step_factor = f;
  o.dtype = t;
  return o;
}

TEST(CollectiveBench, SweepDoublesFromMinToMax) {
  const auto s = sweep_sizes(sweep(1024, 64u << 20, 2), 2);
  ASSERT_EQ(s.size(), 17u);
  EXPECT_EQ(s.front(), 1024u);
  EXPECT_EQ(s[1], 2048u);
  EXPECT_EQ(s.back(), 64u << 20);
}

TEST(CollectiveBench, SweepRoundsToRanksTimesElementAndKeepsMax) {
  // 3 ranks x 4 bytes: multiples of 12; 1500 is not a power-of-two step of 1000 but is always measured.
  const auto s = sweep_sizes(sweep(1000, 1500, 2), 3);
  EXPECT_EQ(s, (std::vector<std::size_t>{996, 1500}));
  // A size below one element per rank becomes one element per rank; duplicates are dropped.
  EXPECT_EQ(sweep_sizes(sweep(1, 8, 2, DType::bf16), 4), (std::vector<std::size_t>{8}));
  EXPECT_EQ(sweep_sizes(sweep(4096, 4096, 1), 2), (std::vector<std::size_t>{4096}));
}

TEST(CollectiveBench, SweepRejectsBadFlags) {
  EXPECT_THROW(sweep_sizes(sweep(2048, 1024, 2), 2), ConfigError);
  EXPECT_THROW(sweep_sizes(sweep(0, 1024, 2), 2), ConfigError);
  EXPECT_THROW(sweep_sizes(sweep(1024, 4096, 1.0), 2), ConfigError);
}

TEST(CollectiveBench, PatternSumsAreExactInBf16AndNotDegenerate) {
  for (int w : {1, 2, 3, 4, 8, 16, 64}) {
    std::set<float> values;
    int differs_across_ranks = 0;
    for (std::size_t i = 0; i < 4096; ++i) {
      float sum = 0;
      for (int r = 0; r < w; ++r) {
        const float v = bench_pattern(r, i, w);
        ASSERT_EQ(v, static_cast<float>(static_cast<int>(v)));  // an integer
        ASSERT_GE(v, 0.0f);
        values.insert(v);
        sum += v;
      }
      ASSERT_LE(sum, 256.0f) << "w=" << w;
      EXPECT_EQ(static_cast<float>(bf16::from_float(sum)), sum) << "w=" << w << " i=" << i;
      if (w > 1 && bench_pattern(0, i, w) != bench_pattern(1, i, w)) ++differs_across_ranks;
    }
    // Enough distinct values that a misplaced block shows up (k = 256 / w, at most 64).
    EXPECT_GE(values.size(), std::min<std::size_t>(4, 256 / w)) << "w=" << w;
    if (w > 1) {
      EXPECT_GT(differs_across_ranks, 3000) << "w=" << w;
    }
  }
}

TEST(CollectiveBench, RowFormatEndsWithWrongCount) {
  CollectiveBenchRow r;
  r.op = coll::CollOp::reduce_scatter;
  r.bytes = 1048576;
  r.count = 131072;
  r.time_us = 100;
  r.algbw_gbps = 10.48576;
  r.busbw_gbps = 5.24288;
  r.bus_over_memcpy = 0.5;
  r.wrong = 0;
  const std::regex bad("%  *[1-9][0-9]*\n");  // the NO_MATCH of CTest collectives_bench_np2
  const std::string ok_row = format_bench_row(r);
  EXPECT_FALSE(std::regex_search(ok_row, bad)) << ok_row;
  EXPECT_NE(ok_row.find("reduce_scatter"), std::string::npos);
  EXPECT_NE(ok_row.find(" 50.0% "), std::string::npos) << ok_row;
  r.wrong = 7;
  EXPECT_TRUE(std::regex_search(format_bench_row(r), bad)) << format_bench_row(r);
  r.wrong = 12345;
  EXPECT_TRUE(std::regex_search(format_bench_row(r), bad)) << format_bench_row(r);
  const std::string csv = format_bench_csv_row(r, 2, 10.0);
  EXPECT_EQ(csv.substr(0, 20), "reduce_scatter,fp32,");
  EXPECT_EQ(csv.substr(csv.size() - 7), ",12345\n");
}

}  // namespace
}  // namespace hzp::harness
