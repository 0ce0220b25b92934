// RingPool: FIFO reclamation with out-of-order release, wrap skipping and its accounting, the
// too-large and timeout errors, stalls counted with real waiting threads, and the pool's memory
// showing up under the allocator's `comm` tag.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/ring_pool.hpp"

namespace hzp {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) until `pred` holds; returns whether it did.
template <typename Pred>
bool eventually(Pred pred, double seconds = 10.0) {
  const double t0 = wall_seconds();
  while (!pred()) {
    if (wall_seconds() - t0 > seconds) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(RingPool, CarvesRingsFromOneRegion) {
  HostBacking host;
  RingPool pool(host, {{"all_gather", 1000}, {"reduce_scatter", 4096}});
  EXPECT_EQ(pool.num_rings(), 2u);
  const RingId ag = pool.ring_id("all_gather");
  const RingId rs = pool.ring_id("reduce_scatter");
  EXPECT_EQ(ag.index, 0u);
  EXPECT_EQ(rs.index, 1u);
  EXPECT_EQ(pool.ring_capacity(ag), 1024u);  // rounded up to the 256-byte alignment
  EXPECT_EQ(pool.reserved_bytes(), 1024u + 4096u);
  EXPECT_EQ(pool.ring_name(rs), "reduce_scatter");
  RingSlot a = pool.acquire(ag, 1);
  RingSlot r = pool.acquire(rs, 1);
  // The rings are laid out back to back in one region.
  EXPECT_EQ(static_cast<char*>(r.data()) - static_cast<char*>(a.data()), 1024);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 256, 0u);
  try {
    pool.ring_id("broadcast");
    FAIL();
  } catch (const PreconditionError& e) {
    EXPECT_NE(e.message().find("all_gather, reduce_scatter"), std::string::npos) << e.what();
  }
}

TEST(RingPool, BadSpecsAreRefused) {
  HostBacking host;
  EXPECT_THROW(RingPool(host, {}), PreconditionError);
  EXPECT_THROW(RingPool(host, {{"a", 256}, {"a", 256}}), PreconditionError);
  EXPECT_THROW(RingPool(host, {{"a", 0}}), PreconditionError);
  RingPoolOptions o;
  o.alignment = 1024;  // more than the host backing guarantees
  EXPECT_THROW(RingPool(host, {{"a", 4096}}, o), PreconditionError);
}

// Capacity 1024, alignment 256. Offsets worked out in the comments.
TEST(RingPool, FifoReclaimWithOutOfOrderReleaseAndWrapWaste) {
  HostBacking host;
  RingPool pool(host, {{"all_gather", 1024}});
  const RingId ag = pool.ring_id("all_gather");

  RingSlot a = pool.acquire(ag, 256);  // [0, 256)
  RingSlot b = pool.acquire(ag, 200);  // [256, 512): 200 B rounded to 256
  RingSlot c = pool.acquire(ag, 256);  // [512, 768)
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(b.offset(), 256u);
  EXPECT_EQ(c.offset(), 512u);
  EXPECT_EQ(b.size(), 200u);
  auto s = pool.stats(ag);
  EXPECT_EQ(s.in_use_bytes, 768u);
  EXPECT_EQ(s.live_slots, 3u);

  // b goes first, but a is older: nothing is reclaimed yet.
  b.release();
  EXPECT_FALSE(b);
  s = pool.stats(ag);
  EXPECT_EQ(s.in_use_bytes, 768u);
  EXPECT_EQ(s.live_bytes, 512u);
  EXPECT_EQ(s.live_slots, 2u);
  EXPECT_FALSE(pool.try_acquire(ag, 512));  // only [768, 1024) is free
  EXPECT_EQ(pool.stats(ag).failed_try_acquires, 1u);

  // Releasing a reclaims a and b together: tail moves to 512.
  void* base = a.data();
  a.release();
  EXPECT_EQ(pool.stats(ag).in_use_bytes, 256u);

  // 512 B does not fit in [768, 1024): skip those 256 B and take [0, 512).
  RingSlot d = pool.try_acquire(ag, 512);
  ASSERT_TRUE(d);
  EXPECT_EQ(d.offset(), 0u);
  EXPECT_EQ(d.data(), base);
  s = pool.stats(ag);
  EXPECT_EQ(s.wraps, 1u);
  EXPECT_EQ(s.wrap_waste_bytes, 256u);
  EXPECT_EQ(s.in_use_bytes, 1024u);  // c 256 + skipped 256 + d 512
  EXPECT_EQ(s.peak_in_use_bytes, 1024u);
  EXPECT_DOUBLE_EQ(s.occupancy(), 1.0);
  EXPECT_FALSE(pool.try_acquire(ag, 256));  // full

  // c's release frees [512, 768); the skipped tail stays with d until d is reclaimed.
  c.release();
  EXPECT_EQ(pool.stats(ag).in_use_bytes, 768u);
  RingSlot e = pool.try_acquire(ag, 256);
  ASSERT_TRUE(e);
  EXPECT_EQ(e.offset(), 512u);
  d.release();
  EXPECT_EQ(pool.stats(ag).in_use_bytes, 256u);
  e.release();
  s = pool.stats(ag);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.acquires, 5u);
  EXPECT_EQ(s.stalls, 0u);
  EXPECT_EQ(s.failed_try_acquires, 2u);
  EXPECT_EQ(s.wrap_waste_bytes, 256u);

  // An empty ring restarts at its base, so the next lap wastes nothing.
  RingSlot f = pool.acquire(ag, 1024);
  EXPECT_EQ(f.offset(), 0u);
  EXPECT_EQ(pool.stats(ag).wrap_waste_bytes, 256u);
}

TEST(RingPool, TooLargeIsAnImmediateError) {
  HostBacking host;
  RingPool pool(host, {{"reduce_scatter", 1024}});
  const RingId rs = pool.ring_id("reduce_scatter");
  const double t0 = wall_seconds();
  try {
    pool.acquire(rs, 1025, 10s);
    FAIL() << "no error";
  } catch (const PreconditionError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("ring 'reduce_scatter'"), std::string::npos) << m;
    EXPECT_NE(m.find("1.00 KiB (1025 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("capacity of 1.00 KiB (1024 B)"), std::string::npos) << m;
  }
  EXPECT_LT(wall_seconds() - t0, 5.0);  // not a wait for the deadline
  EXPECT_THROW(pool.try_acquire(rs, 2048), PreconditionError);
  EXPECT_THROW(pool.acquire(rs, 0), PreconditionError);
  EXPECT_EQ(pool.stats(rs).acquires, 0u);
}

TEST(RingPool, TimeoutNamesRingBytesCapacityAndInUse) {
  HostBacking host;
  RingPool pool(host, {{"all_gather", 1024}});
  const RingId ag = pool.ring_id("all_gather");
  RingSlot full = pool.acquire(ag, 1024);
  const double t0 = wall_seconds();
  try {
    pool.acquire(ag, 512, 50ms);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("ring 'all_gather'"), std::string::npos) << m;
    EXPECT_NE(m.find("slot of 512 B"), std::string::npos) << m;
    EXPECT_NE(m.find("capacity 1.00 KiB (1024 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("in use 1.00 KiB (1024 B)"), std::string::npos) << m;
    EXPECT_EQ(e.code(), ErrorCode::timeout);
  }
  EXPECT_GE(wall_seconds() - t0, 0.045);
  auto s = pool.stats(ag);
  EXPECT_EQ(s.stalls, 1u);
  EXPECT_EQ(s.timeouts, 1u);
  EXPECT_GE(s.stall_seconds, 0.045);
  EXPECT_EQ(s.waiters, 0u);
  full.release();
  EXPECT_TRUE(pool.acquire(ag, 512, 50ms));  // usable again
}

// A waiter blocked on a full ring is woken by a release from another thread, and counted as a
// stall.
TEST(RingPool, BlockedAcquireWakesOnReleaseAndCountsStall) {
  HostBacking host;
  RingPool pool(host, {{"all_gather", 1024}, {"reduce_scatter", 1024}});
  const RingId ag = pool.ring_id("all_gather");
  const RingId rs = pool.ring_id("reduce_scatter");
  RingSlot full = pool.acquire(ag, 1024);

  RingSlot got;
  std::thread waiter([&] { got = pool.acquire(ag, 512, 30s); });
  ASSERT_TRUE(eventually([&] { return pool.stats(ag).waiters == 1; }));
  // Another ring is unaffected by the full one.
  EXPECT_TRUE(pool.try_acquire(rs, 1024));
  std::this_thread::sleep_for(20ms);
  full.release();
  waiter.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(got.offset(), 0u);
  auto s = pool.stats(ag);
  EXPECT_EQ(s.stalls, 1u);
  EXPECT_EQ(s.timeouts, 0u);
  EXPECT_GE(s.stall_seconds, 0.015);
  EXPECT_EQ(s.acquires, 2u);
  EXPECT_EQ(pool.stats(rs).stalls, 0u);
}

// A comm thread fills slots, the compute thread checks and releases them (pairs in reverse order),
// slower than they are produced, so the producer stalls on the full ring.
TEST(RingPool, ProducerConsumerAcrossThreads) {
  HostBacking host;
  RingPool pool(host, {{"all_gather", 4096}});
  const RingId ag = pool.ring_id("all_gather");
  constexpr int kSlots = 64;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, RingSlot>> queue;

  std::thread producer([&] {
    for (int i = 0; i < kSlots; ++i) {
      const std::size_t bytes = 256 * static_cast<std::size_t>(1 + i % 4) - (i % 3);
      RingSlot slot = pool.acquire(ag, bytes, 30s);
      std::memset(slot.data(), i & 0xFF, slot.size());
      {
        std::lock_guard lock(mu);
        queue.emplace_back(i, std::move(slot));
      }
      cv.notify_one();
    }
  });

  int verified = 0, bad = 0;
  auto pop = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !queue.empty(); });
    auto item = std::move(queue.front());
    queue.pop_front();
    return item;
  };
  auto check = [&](const std::pair<int, RingSlot>& item) {
    const auto* p = item.second.data_as<unsigned char>();
    for (std::size_t k = 0; k < item.second.size(); ++k)
      if (p[k] != static_cast<unsigned char>(item.first & 0xFF)) {
        ++bad;
        break;
      }
    ++verified;
  };
  for (int i = 0; i < kSlots; i += 2) {
    auto first = pop();
    auto second = pop();
    std::this_thread::sleep_for(2ms);
    check(first);
    check(second);
    second.second.release();  // the younger slot first: its space waits for the older one
    first.second.release();
  }
  producer.join();

  EXPECT_EQ(verified, kSlots);
  EXPECT_EQ(bad, 0);
  auto s = pool.stats(ag);
  EXPECT_EQ(s.acquires, std::uint64_t{kSlots});
  EXPECT_GE(s.stalls, 1u);
  EXPECT_GT(s.stall_seconds, 0.0);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_slots, 0u);
  EXPECT_LE(s.peak_in_use_bytes, 4096u);
  EXPECT_GT(s.peak_in_use_bytes, 1024u);
}

TEST(RingPool, RegionFromAllocatorIsTaggedComm) {
  HostBacking host;
  CachingAllocator al(host);
  {
    RingPool pool(al, {{"all_gather", 3 * 1024 * 1024}, {"reduce_scatter", 1024 * 1024}});
    EXPECT_EQ(pool.reserved_bytes(), 4u * 1024 * 1024);
    auto s = al.stats();
    EXPECT_EQ(s.tag(AllocationTag::comm).requested_bytes, pool.reserved_bytes());
    EXPECT_EQ(s.tag(AllocationTag::comm).live_allocations, 1u);
    RingSlot slot = pool.acquire(pool.ring_id("reduce_scatter"), 1024 * 1024);
    EXPECT_TRUE(slot);
    pool.reset_peaks();
    EXPECT_EQ(pool.stats(pool.ring_id("reduce_scatter")).peak_in_use_bytes, 1024u * 1024);
  }
  EXPECT_EQ(al.stats().tag(AllocationTag::comm).live_allocations, 0u);
  EXPECT_EQ(al.stats().allocated_bytes, 0u);
}

}  // namespace
}  // namespace hzp
