// Collectives from a background thread on a duplicated communicator while the main thread computes
// and runs its own collectives (asynchzp's asynchronous schedule, docs/data-parallel.md), with exact
// results, and shared counters read by the main thread while the background thread writes them. Also built with
// ThreadSanitizer (label tsan): any data race between the two threads fails the test.
#include <atomic>
#include <thread>

#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

double value(int r, std::int64_t i, int iter) { return static_cast<double>(((r + 1) * (i % 5 + 1) + iter) % 9 - 4); }

// One round of checked collectives on `c`; returns false (with a message) on the first mismatch.
bool checked_round(Communicator& c, int iter, std::string& why) {
  const int p = c.size(), r = c.rank();
  const std::int64_t n = 13;
  Buffer shard(DType::bf16, n), gathered(DType::bf16, n * p);
  shard.fill([&](std::int64_t i) { return value(r, i, iter); });
  c.all_gather(shard.cview(), gathered.view(), StreamRef::host());
  for (int q = 0; q < p; ++q)
    for (std::int64_t i = 0; i < n; ++i)
      if (gathered.get(q * n + i) != static_cast<float>(value(q, i, iter))) {
        why = "all_gather block " + std::to_string(q);
        return false;
      }
  Buffer full(DType::f32, n * p), part(DType::f32, n);
  full.fill([&](std::int64_t i) { return value(r, i, iter); });
  c.reduce_scatter(full.cview(), part.view(), ReduceOp::sum, StreamRef::host());
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += value(q, r * n + i, iter);
    if (part.get(i) != static_cast<float>(s)) {
      why = "reduce_scatter element " + std::to_string(i);
      return false;
    }
  }
  // Nonblocking, completed by polling test() as a prefetching thread would.
  Buffer acc(DType::bf16, n);
  acc.fill([&](std::int64_t i) { return value(r, i, iter); });
  Request req = c.start_all_reduce(acc.view(), ReduceOp::sum, StreamRef::host());
  while (!req.test()) std::this_thread::yield();
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += value(q, i, iter);
    if (acc.get(i) != stored(DType::bf16, s)) {
      why = "all_reduce element " + std::to_string(i);
      return false;
    }
  }
  // An exchange and a broadcast, the other patterns a background thread may run.
  Buffer a2a_in(DType::f32, 3 * p), a2a_out(DType::f32, 3 * p);
  a2a_in.fill([&](std::int64_t i) { return value(r, i, iter); });
  c.all_to_all(a2a_in.cview(), a2a_out.view(), StreamRef::host());
  for (int q = 0; q < p; ++q)
    for (std::int64_t j = 0; j < 3; ++j)
      if (a2a_out.get(q * 3 + j) != static_cast<float>(value(q, r * 3 + j, iter))) {
        why = "all_to_all from rank " + std::to_string(q);
        return false;
      }
  const int root = iter % p;
  Buffer b(DType::bf16, 7);
  b.fill([&](std::int64_t i) { return r == root ? value(root, i, iter) : 0.0; });
  c.broadcast(b.view(), root, StreamRef::host());
  for (std::int64_t i = 0; i < 7; ++i)
    if (b.get(i) != static_cast<float>(value(root, i, iter))) {
      why = "broadcast from root " + std::to_string(root);
      return false;
    }
  return true;
}

int iterations() { return hzp::test::world_size() >= 8 ? 4 : 10; }

// Checked rounds on `c`, catching everything: an exception escaping a thread would terminate the
// rank and leave its peers waiting until their deadline.
void run_rounds(Communicator& c, int first_iter, bool& ok, std::string& why) {
  try {
    for (int it = 0; it < iterations() && ok; ++it) ok = checked_round(c, first_iter + it, why);
  } catch (const std::exception& e) {
    ok = false;
    why = e.what();
  }
}

TEST(MpiBackground, DuplicateInABackgroundThreadWhileMainComputes) {
  auto world = make_world(test_config());
  auto bg = world->duplicate("background", /*share_counters=*/true);
  std::atomic<bool> done{false};
  std::string why;
  bool ok = true;
  std::thread t([&] {
    run_rounds(*bg, 0, ok, why);
    done.store(true, std::memory_order_release);
  });
  // The main thread computes, and reads the counters the background thread is writing.
  double x = 0;
  std::uint64_t seen = 0;
  while (!done.load(std::memory_order_acquire)) {
    for (int i = 0; i < 20000; ++i) x += 1e-9 * i;
    seen = world->counters().snapshot().total("background", CollOp::all_gather).calls;
  }
  t.join();
  EXPECT_TRUE(ok) << why;
  EXPECT_GT(x, 0);
  EXPECT_LE(seen, static_cast<std::uint64_t>(iterations()));
  EXPECT_EQ(world->counters().snapshot().total("background", CollOp::all_gather).calls,
            static_cast<std::uint64_t>(iterations()));
}

TEST(MpiBackground, MainAndBackgroundBothCommunicate) {
  auto world = make_world(test_config());
  auto bg = world->duplicate("background", /*share_counters=*/true);
  std::string why_bg, why_main;
  bool ok_bg = true, ok_main = true;
  std::thread t([&] { run_rounds(*bg, 0, ok_bg, why_bg); });
  run_rounds(*world, 100, ok_main, why_main);
  t.join();
  EXPECT_TRUE(ok_bg) << "background: " << why_bg;
  EXPECT_TRUE(ok_main) << "main: " << why_main;
  const CounterSnapshot s = world->counters().snapshot();
  EXPECT_EQ(s.total("world", CollOp::reduce_scatter).calls, static_cast<std::uint64_t>(iterations()));
  EXPECT_EQ(s.total("background", CollOp::reduce_scatter).calls, static_cast<std::uint64_t>(iterations()));
}

// Two background threads, each on its own duplicate (prefetch and gradient drain in AsyncHZP),
// with counters kept apart.
TEST(MpiBackground, TwoBackgroundThreadsOnTwoDuplicates) {
  auto world = make_world(test_config());
  auto a = world->duplicate("prefetch", true);
  auto b = world->duplicate("drain", false);
  std::string wa, wb;
  bool oa = true, ob = true;
  std::thread ta([&] { run_rounds(*a, 0, oa, wa); });
  std::thread tb([&] { run_rounds(*b, 50, ob, wb); });
  ta.join();
  tb.join();
  EXPECT_TRUE(oa) << wa;
  EXPECT_TRUE(ob) << wb;
  EXPECT_EQ(b->counters().snapshot().total(CollOp::all_reduce).calls, static_cast<std::uint64_t>(iterations()));
  EXPECT_EQ(world->counters().snapshot().total("drain", CollOp::all_reduce).calls, 0u);
}

}  // namespace
}  // namespace hzp::coll::test
