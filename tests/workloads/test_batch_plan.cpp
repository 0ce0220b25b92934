// The batch split (docs/data.md "Batches"): which samples each micro-batch holds, which data-parallel rank
// gets it (j mod dp) at dp = 1, 2, 4, 8, that the ranks together see exactly the dp = 1 data, the
// inputs/targets shift, and the configuration errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "data_test_util.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "hzp/workloads/data/markov_source.hpp"

namespace hzp::workloads {
namespace {

using test::throws_with;

TEST(BatchPlan, CountsAndFirstSamples) {
  const BatchPlan plan(16, 2, 4);
  EXPECT_EQ(plan.micro_batches_per_step(), 8);
  EXPECT_EQ(plan.micro_batches_per_rank(), 2);
  EXPECT_EQ(plan.first_sample(0, 0), 0);
  EXPECT_EQ(plan.first_sample(0, 7), 14);
  EXPECT_EQ(plan.first_sample(3, 5), 3 * 16 + 10);
}

TEST(BatchPlan, RankAssignmentAtDp1248) {
  // G = 16, M = 2: micro-batches 0..7 of a step. Rank r processes j = r, r + dp, … in order.
  const std::map<int, std::vector<std::vector<std::int64_t>>> expected = {
      {1, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {2, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {4, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {8, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
  };
  for (const auto& [dp, per_rank] : expected) {
    const BatchPlan plan(16, 2, dp);
    for (int r = 0; r < dp; ++r) {
      EXPECT_EQ(plan.micro_batches_of(r), per_rank[r]) << "dp=" << dp << " rank " << r;
      for (std::int64_t j : per_rank[r]) EXPECT_EQ(plan.rank_of(j), r);
    }
  }
  // The samples rank 1 gets at dp = 2 in step 3: micro-batches 1, 3, 5, 7 → samples 50–51, 54–55, …
  const BatchPlan plan(16, 2, 2);
  std::vector<std::int64_t> samples;
  for (std::int64_t j : plan.micro_batches_of(1))
    for (std::int64_t b = 0; b < 2; ++b) samples.push_back(plan.first_sample(3, j) + b);
  EXPECT_EQ(samples, (std::vector<std::int64_t>{50, 51, 54, 55, 58, 59, 62, 63}));
}

TEST(BatchPlan, UnionOverRanksIsTheSingleRankData) {
  MarkovChainParams p;
  p.order = 2;
  p.vocab = 16;
  p.successors = 4;
  p.seed = 9;
  const MarkovSource src(p, 12);
  const std::int64_t G = 16, M = 2, T = 12;
  const BatchPlan ref(G, M, 1);
  for (std::int64_t step : {0, 5}) {
    // dp = 1: every micro-batch of the step, by j.
    std::vector<std::vector<std::int32_t>> want(ref.micro_batches_per_step());
    for (std::int64_t j = 0; j < ref.micro_batches_per_step(); ++j) {
      std::vector<std::int32_t> in(M * T), tg(M * T);
      fill_micro_batch(src, ref, step, j, in, tg);
      want[j] = in;
      want[j].insert(want[j].end(), tg.begin(), tg.end());
    }
    for (std::int64_t dp : {2, 4, 8}) {
      const BatchPlan plan(G, M, dp);
      std::map<std::int64_t, std::vector<std::int32_t>> got;
      for (std::int64_t r = 0; r < dp; ++r)
        for (std::int64_t j : plan.micro_batches_of(r)) {
          std::vector<std::int32_t> in(M * T), tg(M * T);
          fill_micro_batch(src, plan, step, j, in, tg);
          ASSERT_FALSE(got.count(j)) << "micro-batch " << j << " dealt twice at dp=" << dp;
          in.insert(in.end(), tg.begin(), tg.end());
          got[j] = in;
        }
      ASSERT_EQ(std::int64_t(got.size()), ref.micro_batches_per_step()) << "dp=" << dp;
      for (std::int64_t j = 0; j < ref.micro_batches_per_step(); ++j)
        EXPECT_EQ(got[j], want[j]) << "dp=" << dp << " step " << step << " micro-batch " << j;
    }
  }
}

TEST(BatchPlan, InputsAndTargetsAreTheSampleShiftedByOne) {
  MarkovChainParams p;
  p.vocab = 32;
  const MarkovSource src(p, 8);
  const BatchPlan plan(6, 3, 1);
  std::vector<std::int32_t> in(24), tg(24), x(9);
  fill_micro_batch(src, plan, 2, 1, in, tg);
  for (std::int64_t b = 0; b < 3; ++b) {
    src.sample(2 * 6 + 1 * 3 + b, x);
    for (std::int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(in[b * 8 + t], x[t]);
      EXPECT_EQ(tg[b * 8 + t], x[t + 1]);
    }
  }
  std::vector<std::int32_t> small(23);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { fill_micro_batch(src, plan, 0, 0, small, tg); },
                                             {"micro_batch_size=3", "seq_len=8", "24 tokens"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { fill_micro_batch(src, plan, 0, 2, in, tg); },
                                             {"micro-batch j=2", "[0, 2)"}));
}

TEST(BatchPlan, GlobalBatchNotAMultipleOfMicroBatch) {
  EXPECT_TRUE(throws_with<ConfigError>([] { BatchPlan p(10, 4, 1); },
                                       {"train.global_batch=10", "train.micro_batch_size=4", "not a multiple",
                                        "e.g. 8 or 12", "divisor of 10"}));
}

TEST(BatchPlan, MicroBatchCountNotAMultipleOfDp) {
  EXPECT_TRUE(throws_with<ConfigError>(
      [] { BatchPlan p(16, 2, 3); },
      {"train.global_batch=16", "train.micro_batch_size=2", "= 8 micro-batches", "dp=3",
       "multiple of train.micro_batch_size·dp = 6", "e.g. 12 or 18", "divides 8"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { BatchPlan p(16, 4, 8); }, {"= 4 micro-batches", "dp=8"}));
  // No multiple of 32 lies below 16: one example, not "e.g. 32 or 32".
  const std::string msg = [] {
    try {
      BatchPlan p(16, 4, 8);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(msg.find("(e.g. 32)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("32 or 32"), std::string::npos) << msg;
}

TEST(BatchPlan, NonPositiveValues) {
  EXPECT_TRUE(throws_with<ConfigError>([] { BatchPlan p(0, 2, 1); }, {"train.global_batch=0", "≥ 1"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { BatchPlan p(8, -1, 1); }, {"train.micro_batch_size=-1"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { BatchPlan p(8, 2, 0); }, {"dp=0"}));
}

TEST(BatchPlan, IndexChecks) {
  const BatchPlan plan(8, 2, 2);
  EXPECT_THROW(plan.first_sample(-1, 0), PreconditionError);
  EXPECT_THROW(plan.rank_of(4), PreconditionError);
  EXPECT_THROW(plan.micro_batch_of(2, 0), PreconditionError);
  EXPECT_THROW(plan.micro_batch_of(0, 2), PreconditionError);
}

}  // namespace
}  // namespace hzp::workloads
