// The intra-operation pool (core/intra_op.hpp): every item runs exactly once whatever the thread count and grain,
// ranges are contiguous and ordered, nested and concurrent callers run inline, exceptions reach the caller, the
// caller runs the ranges no worker has claimed, and the pool can be resized between uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "hzp/core/intra_op.hpp"

namespace hzp::core {
namespace {

struct PoolSize {  // restores one thread after each test, so other tests in this binary see the default
  explicit PoolSize(int n) { set_intra_op_threads(n); }
  ~PoolSize() { set_intra_op_threads(1); }
};

TEST(IntraOp, StartsWithOneThreadAndRunsInline) {
  EXPECT_EQ(intra_op_threads(), 1);
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) { calls.emplace_back(b, e); });
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::pair<std::int64_t, std::int64_t>{0, 100}));
  parallel_for(0, 1, [&](std::int64_t, std::int64_t) { ADD_FAILURE() << "called for an empty range"; });
}

TEST(IntraOp, EveryItemOnceForEveryThreadCountAndGrain) {
  for (int threads : {1, 2, 3, 4, 7, 8, 16}) {
    PoolSize size(threads);
    EXPECT_EQ(intra_op_threads(), threads);
    for (std::int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (std::int64_t grain : {1, 16, 500}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::mutex mu;
        std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
        std::set<std::thread::id> ids;
        parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
          std::lock_guard lock(mu);
          ranges.emplace_back(b, e);
          ids.insert(std::this_thread::get_id());
        });
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "item " << i << " n=" << n << " grain=" << grain
                                                                   << " threads=" << threads;
        const std::int64_t expect = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n / grain));
        EXPECT_EQ(static_cast<std::int64_t>(ranges.size()), expect) << "n=" << n << " grain=" << grain;
        // A range no worker has claimed when the caller is done with its own is run by the caller, so at most
        // one thread per range (TheCallerRunsARangeNoWorkerHasClaimed).
        EXPECT_LE(static_cast<std::int64_t>(ids.size()), expect);
        for (const auto& [b, e] : ranges) EXPECT_TRUE(expect == 1 || e - b >= grain) << b << ".." << e;
      }
    }
  }
}

TEST(IntraOp, NestedCallsRunInline) {
  PoolSize size(2);
  std::atomic<int> inner_calls{0};
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
    parallel_for(10, 1, [&](std::int64_t b, std::int64_t e) {
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 10);
      inner_calls.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
}

TEST(IntraOp, ConcurrentCallersEachGetEveryItem) {
  PoolSize size(2);
  constexpr std::int64_t kN = 10000;
  std::vector<std::atomic<int>> a(kN), b(kN);
  auto hammer = [](std::vector<std::atomic<int>>& hits) {
    for (int rep = 0; rep < 200; ++rep)
      parallel_for(kN, 64, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
      });
  };
  std::thread other([&] { hammer(b); });
  hammer(a);
  other.join();
  for (std::int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(a[static_cast<std::size_t>(i)].load(), 200) << i;
    ASSERT_EQ(b[static_cast<std::size_t>(i)].load(), 200) << i;
  }
}

TEST(IntraOp, AnExceptionOnAWorkerReachesTheCaller) {
  PoolSize size(2);
  EXPECT_THROW(parallel_for(100, 1,
                            [](std::int64_t b, std::int64_t) {
                              if (b != 0) throw std::runtime_error("second range");
                            }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<std::int64_t> sum{0};
  parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 100);
}

TEST(IntraOp, WorkersSleepAndWakeBetweenSparseJobs) {
  PoolSize size(2);
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the spin: the worker is asleep
    std::set<std::thread::id> ids;
    std::mutex mu;
    std::atomic<bool> second_ran{false};
    parallel_for(2, 1, [&](std::int64_t b, std::int64_t) {
      {
        std::lock_guard lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      if (b == 1) {
        second_ran.store(true);
        return;
      }
      // The caller's range holds it until the second range has run: the caller takes the others only after its
      // own, so only the woken worker can run it. Deadline, so that a lost wake-up fails instead of hanging.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!second_ran.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    });
    EXPECT_TRUE(second_ran.load());
    EXPECT_EQ(ids.size(), 2u);
  }
}

TEST(IntraOp, TheCallerRunsARangeNoWorkerHasClaimed) {
  // After a sleep the worker needs a wake-up (microseconds) before it can claim its range, while the caller's
  // range of one empty item ends at once: the caller runs the second range itself rather than wait. Over many
  // jobs this must happen at least once; without claiming (every range waited for on its own worker) it never does.
  PoolSize size(2);
  int by_caller = 0;
  for (int rep = 0; rep < 200; ++rep) {
    std::this_thread::sleep_for(std::chrono::microseconds(400));  // past the spin
    std::array<std::thread::id, 2> who{};
    std::array<std::atomic<int>, 2> runs{};
    parallel_for_ranges(2, 1, [&](int range, std::int64_t, std::int64_t) {
      who[static_cast<std::size_t>(range)] = std::this_thread::get_id();
      runs[static_cast<std::size_t>(range)].fetch_add(1);
    });
    ASSERT_EQ(runs[0].load(), 1);  // every range exactly once, whoever ran it
    ASSERT_EQ(runs[1].load(), 1);
    if (who[1] == std::this_thread::get_id()) ++by_caller;
  }
  EXPECT_GT(by_caller, 0);
}

TEST(IntraOp, EveryRangeOnceWhileWorkersComeLate) {
  // Jobs back to back and after sleeps, with ranges of uneven cost: whichever thread claims a range, each range
  // number runs once per job and each item once, and the next job never sees a late worker's run of the last.
  PoolSize size(4);
  for (int rep = 0; rep < 300; ++rep) {
    if (rep % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    const std::int64_t n = 1 + rep % 13;
    std::vector<std::atomic<int>> item(static_cast<std::size_t>(n));
    std::array<std::atomic<int>, 4> range_runs{};
    parallel_for_ranges(n, 1, [&](int range, std::int64_t b, std::int64_t e) {
      range_runs[static_cast<std::size_t>(range)].fetch_add(1);
      for (std::int64_t i = b; i < e; ++i) item[static_cast<std::size_t>(i)].fetch_add(1);
      if (range == 3) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    const int ranges = intra_op_ranges(n, 1);
    for (int r = 0; r < 4; ++r) ASSERT_EQ(range_runs[static_cast<std::size_t>(r)].load(), r < ranges ? 1 : 0);
    for (auto& c : item) ASSERT_EQ(c.load(), 1);
  }
}

TEST(IntraOp, RefusesZeroThreads) { EXPECT_ANY_THROW(set_intra_op_threads(0)); }

}  // namespace
}  // namespace hzp::core
