// Checks of the MPI test main itself: rank queries, the deadline-protected barrier helper, the
// all-ranks agreement, and that the skip macros skip (visibly) when the rank count does not fit.
#include <thread>

#include "mpi_test.hpp"

namespace {

TEST(MpiTestSupport, RankAndSizeMatchWorld) {
  int r = -1, s = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  EXPECT_EQ(r, hzp::test::world_rank());
  EXPECT_EQ(s, hzp::test::world_size());
}

TEST(MpiTestSupport, RunThenBarrierWaitsForLateRank) {
  // The last rank arrives late; everyone must still leave the barrier (after it).
  bool ran = false;
  hzp::test::run_then_barrier([&] {
    if (hzp::test::world_rank() == hzp::test::world_size() - 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ran = true;
  });
  EXPECT_TRUE(ran);
}

TEST(MpiTestSupport, AllRanksIsALogicalAnd) {
  EXPECT_TRUE(hzp::test::all_ranks(true));
  EXPECT_FALSE(hzp::test::all_ranks(hzp::test::world_rank() != 0));
}

TEST(MpiTestSupport, RequireRanksSkipsWhenTooFew) {
  HZP_REQUIRE_MIN_RANKS(100000);
  ADD_FAILURE() << "not skipped";
}

TEST(MpiTestSupport, RequireDivisibleSkipsOrRuns) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  EXPECT_EQ(hzp::test::world_size() % 2, 0);
}

}  // namespace
