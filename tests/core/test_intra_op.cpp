// The intra-operation pool (core/intra_op.hpp): every item runs exactly once whatever the thread count and grain,
// ranges are contiguous and ordered, nested and concurrent callers run inline, exceptions reach the caller, and
// the pool can be resized between uses.
#include <gtest/gtest.h>

#include <algorithm>
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
        EXPECT_EQ(static_cast<std::int64_t>(ids.size()), expect);
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
    parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
      std::lock_guard lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(ids.size(), 2u);
  }
}

TEST(IntraOp, RefusesZeroThreads) { EXPECT_ANY_THROW(set_intra_op_threads(0)); }

}  // namespace
}  // namespace hzp::core
