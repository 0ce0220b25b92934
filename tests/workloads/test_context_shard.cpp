// ContextShard (hzp/workloads/context_shard.hpp): the load-balanced chunks of context parallelism, written out by
// hand for cp = 2, covering every token of a sequence exactly once over the group, and balancing the causal
// attention work (the number of visible (query, key) pairs of each rank's queries) exactly; the refusal.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/workloads/context_shard.hpp"

namespace hzp::test {
namespace {

using workloads::ContextShard;

TEST(ContextShard, TwoRanksHoldChunksZeroThreeAndOneTwo) {
  // T = 8, cp = 2: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(ContextShard(8, 2, 0).positions(1), (std::vector<std::int32_t>{0, 1, 6, 7}));
  EXPECT_EQ(ContextShard(8, 2, 1).positions(1), (std::vector<std::int32_t>{2, 3, 4, 5}));
  const std::vector<std::int32_t> whole = {10, 11, 12, 13, 14, 15, 16, 17, 20, 21, 22, 23, 24, 25, 26, 27};
  std::vector<std::int32_t> mine(8);
  ContextShard(8, 2, 0).take(whole, mine, 2);
  EXPECT_EQ(mine, (std::vector<std::int32_t>{10, 11, 16, 17, 20, 21, 26, 27}));
  ContextShard(8, 2, 1).take(whole, mine, 2);
  EXPECT_EQ(mine, (std::vector<std::int32_t>{12, 13, 14, 15, 22, 23, 24, 25}));
}

TEST(ContextShard, EveryTokenOnceAndTheCausalWorkBalanced) {
  for (int cp : {1, 2, 3, 4, 8})
    for (std::int64_t t : {2 * cp, 8 * cp, 64 * cp}) {
      std::vector<int> seen(static_cast<std::size_t>(t), 0);
      std::int64_t first_work = -1;
      for (int r = 0; r < cp; ++r) {
        const ContextShard s(t, cp, r);
        std::int64_t work = 0;  // query at position p sees p + 1 keys
        for (std::int32_t p : s.positions(1)) {
          ++seen[static_cast<std::size_t>(p)];
          work += p + 1;
        }
        if (first_work < 0) first_work = work;
        EXPECT_EQ(work, first_work) << "cp " << cp << " T " << t << " rank " << r;
      }
      for (std::int64_t p = 0; p < t; ++p) EXPECT_EQ(seen[static_cast<std::size_t>(p)], 1) << "position " << p;
    }
}

TEST(ContextShard, RefusesASequenceThatDoesNotSplitIntoTwoCpChunks) {
  try {
    ContextShard(60, 4, 0);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.seq_len = 60"), std::string::npos) << m;
    EXPECT_NE(m.find("2 · scheduler.cp = 8"), std::string::npos) << m;
  }
  EXPECT_THROW(ContextShard(64, 4, 4), PreconditionError);
}

}  // namespace
}  // namespace hzp::test
