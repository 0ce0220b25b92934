// CachingAllocator: statistics after scripted allocation patterns, checked against values worked
// out by hand in the comments (splits, coalescing, pools, tags, peaks, empty_cache, limits, OOM
// text), and invariants after concurrent use by several threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "hzp/core/caching_allocator.hpp"

namespace hzp {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * 1024;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// A host backing with a byte budget, so tests can make the "device" run out and can check that the
// allocator hands every segment back.
class BudgetBacking final : public MemoryBacking {
 public:
  explicit BudgetBacking(std::size_t budget) : budget_(budget) {}
  void* allocate(std::size_t bytes) override {
    if (outstanding_ + bytes > budget_) {
      ++refusals_;
      return nullptr;
    }
    outstanding_ += bytes;
    return host_.allocate(bytes);
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    outstanding_ -= bytes;
    host_.deallocate(p, bytes);
  }
  Device device() const noexcept override { return Device::cpu(); }
  std::string_view name() const noexcept override { return "budget"; }
  std::size_t alignment() const noexcept override { return host_.alignment(); }

  std::size_t outstanding() const { return outstanding_; }
  int refusals() const { return refusals_; }

 private:
  HostBacking host_;
  std::size_t budget_;
  std::size_t outstanding_ = 0;
  int refusals_ = 0;
};

TEST(AllocationTag, NamesRoundTrip) {
  EXPECT_EQ(allocation_tag_name(AllocationTag::adam_m), "m");
  EXPECT_EQ(allocation_tag_name(AllocationTag::adam_v), "v");
  EXPECT_EQ(allocation_tag_name(AllocationTag::activation), "activation");
  for (AllocationTag t : kAllAllocationTags)
    EXPECT_EQ(allocation_tag_from_name(allocation_tag_name(t)), t);
  EXPECT_FALSE(allocation_tag_from_name("adam_m").has_value());
}

TEST(CachingAllocator, SizeClassesFollowConfig) {
  HostBacking host;
  CachingAllocator a(host);
  EXPECT_EQ(a.rounded_size(1), 512u);
  EXPECT_EQ(a.rounded_size(512), 512u);
  EXPECT_EQ(a.rounded_size(513), 1024u);
  EXPECT_EQ(a.segment_size_for(1), 2 * MiB);             // small pool
  EXPECT_EQ(a.segment_size_for(1 * MiB), 2 * MiB);       // still small
  EXPECT_EQ(a.segment_size_for(1 * MiB + 1), 20 * MiB);  // medium tier
  EXPECT_EQ(a.segment_size_for(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(a.segment_size_for(10 * MiB), 10 * MiB);  // large: rounded to 2 MiB
  EXPECT_EQ(a.segment_size_for(10 * MiB + 1), 12 * MiB);

  CachingAllocatorConfig bad;
  bad.round_bytes = 500;
  EXPECT_THROW(CachingAllocator(host, bad), ConfigError);
  bad = {};
  bad.small_segment_bytes = 512 * KiB;  // smaller than the largest small request
  EXPECT_THROW(CachingAllocator(host, bad), ConfigError);
}

// The main script, default config. Addresses are relative to the small segment's base `s0`.
TEST(CachingAllocator, ScriptedSplitCoalesceAndStats) {
  HostBacking host;
  CachingAllocator al(host);
  constexpr std::size_t kSmallSeg = 2 * MiB;  // 2097152

  // 1. a: 1000 B -> 1024 B block at s0, tail 2097152 - 1024 = 2096128 stays free.
  void* a = al.allocate_raw(1000, AllocationTag::activation);
  auto s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.requested_bytes, 1000u);
  EXPECT_EQ(s.reserved_bytes, kSmallSeg);
  EXPECT_EQ(s.num_segments, 1u);
  EXPECT_EQ(s.num_backing_allocs, 1u);
  EXPECT_EQ(s.largest_free_block, 2096128u);
  EXPECT_EQ(s.free_bytes, 2096128u);
  EXPECT_DOUBLE_EQ(s.slack(), 1.0 - 1024.0 / 2097152.0);
  EXPECT_DOUBLE_EQ(s.ext_frag(), 0.0);
  const std::uintptr_t s0 = addr(a);
  EXPECT_EQ(s0 % 256, 0u);

  // 2. b: 307200 B (600 x 512) at s0+1024.  3. c: 200000 B -> 200192 B at s0+308224.
  void* b = al.allocate_raw(307200, AllocationTag::grad);
  void* c = al.allocate_raw(200000, AllocationTag::param);
  EXPECT_EQ(addr(b), s0 + 1024);
  EXPECT_EQ(addr(c), s0 + 308224);
  s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 508416u);      // 1024 + 307200 + 200192
  EXPECT_EQ(s.requested_bytes, 508200u);      // 1000 + 307200 + 200000
  EXPECT_EQ(s.largest_free_block, 1588736u);  // 2097152 - 508416
  EXPECT_EQ(s.num_backing_allocs, 1u);

  // 4. Free b: a hole of 307200 between two live blocks, no coalescing.
  al.free_raw(b);
  s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 201216u);
  EXPECT_EQ(s.free_bytes, 1895936u);  // 307200 + 1588736
  EXPECT_EQ(s.largest_free_block, 1588736u);
  EXPECT_DOUBLE_EQ(s.ext_frag(), 1.0 - 1588736.0 / 1895936.0);

  // 5. d: 102400 B: best fit is the 307200 hole (not the 1588736 tail), split into 102400 + 204800.
  void* d = al.allocate_raw(102400, AllocationTag::grad);
  EXPECT_EQ(d, b);
  s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 303616u);
  EXPECT_EQ(s.free_bytes, 1793536u);  // 204800 + 1588736
  EXPECT_EQ(s.largest_free_block, 1588736u);

  // 6. Free c: merges with the 204800 hole before it and the 1588736 tail after it.
  al.free_raw(c);
  s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 103424u);      // a + d
  EXPECT_EQ(s.largest_free_block, 1993728u);  // 204800 + 200192 + 1588736
  EXPECT_EQ(s.free_bytes, 1993728u);
  EXPECT_DOUBLE_EQ(s.ext_frag(), 0.0);
  EXPECT_EQ(s.peak_allocated_bytes, 508416u);
  EXPECT_EQ(s.peak_requested_bytes, 508200u);
  EXPECT_EQ(s.tag(AllocationTag::activation).allocated_bytes, 1024u);
  EXPECT_EQ(s.tag(AllocationTag::activation).requested_bytes, 1000u);
  EXPECT_EQ(s.tag(AllocationTag::grad).allocated_bytes, 102400u);
  EXPECT_EQ(s.tag(AllocationTag::grad).peak_allocated_bytes, 307200u);
  EXPECT_EQ(s.tag(AllocationTag::grad).live_allocations, 1u);
  EXPECT_EQ(s.tag(AllocationTag::param).allocated_bytes, 0u);
  EXPECT_EQ(s.tag(AllocationTag::param).peak_allocated_bytes, 200192u);
  EXPECT_EQ(s.tag(AllocationTag::param).peak_requested_bytes, 200000u);

  // 7. e: 3 MiB + 1 -> 3146240 B, large pool, medium tier: a 20 MiB segment, 17825280 B tail split
  // off.
  void* e = al.allocate_raw(3 * MiB + 1, AllocationTag::other);
  s = al.stats();
  EXPECT_EQ(s.reserved_bytes, 23068672u);  // 2 MiB + 20 MiB
  EXPECT_EQ(s.num_segments, 2u);
  EXPECT_EQ(s.allocated_bytes, 3249664u);  // 103424 + 3146240
  EXPECT_EQ(s.largest_free_block, 17825280u);
  EXPECT_EQ(s.free_bytes, 19819008u);  // 1993728 + 17825280
  EXPECT_DOUBLE_EQ(s.ext_frag(), 1.0 - 17825280.0 / 19819008.0);

  // 8. f: 16 MiB + 1000 -> 16778240 B from the 17825280 tail. The 1047040 B left is not above
  // 1 MiB, so it is not split off: f's block is the whole tail.
  void* f = al.allocate_raw(16 * MiB + 1000, AllocationTag::other);
  EXPECT_EQ(addr(f), addr(e) + 3146240);
  s = al.stats();
  EXPECT_EQ(s.num_backing_allocs, 2u);
  EXPECT_EQ(s.allocated_bytes, 21074944u);  // 103424 + 20 MiB
  EXPECT_EQ(s.tag(AllocationTag::other).allocated_bytes, 20 * MiB);
  EXPECT_EQ(s.tag(AllocationTag::other).requested_bytes, 19923945u);  // 3145729 + 16778216
  EXPECT_EQ(s.largest_free_block, 1993728u);  // only the small pool has free memory now
  EXPECT_DOUBLE_EQ(s.ext_frag(), 0.0);
  EXPECT_EQ(s.peak_allocated_bytes, 21074944u);

  // 9. Free e and f: they coalesce into the whole 20 MiB segment, which empty_cache returns.
  al.free_raw(e);
  al.free_raw(f);
  s = al.stats();
  EXPECT_EQ(s.largest_free_block, 20 * MiB);
  EXPECT_EQ(s.reserved_bytes, 23068672u);  // cached, not returned
  EXPECT_EQ(al.empty_cache(), 20 * MiB);
  s = al.stats();
  EXPECT_EQ(s.reserved_bytes, kSmallSeg);
  EXPECT_EQ(s.num_segments, 1u);
  EXPECT_EQ(s.num_backing_allocs, 2u);
  EXPECT_EQ(s.num_backing_frees, 1u);
  EXPECT_EQ(s.peak_reserved_bytes, 23068672u);

  // 10. reset_peaks brings every peak to its current value.
  al.reset_peaks();
  s = al.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 103424u);
  EXPECT_EQ(s.peak_reserved_bytes, kSmallSeg);
  EXPECT_EQ(s.tag(AllocationTag::param).peak_allocated_bytes, 0u);
  EXPECT_EQ(s.tag(AllocationTag::grad).peak_allocated_bytes, 102400u);

  // 11. Free a: a 1024 hole before d. Then d: everything merges back into one 2 MiB block.
  al.free_raw(a);
  s = al.stats();
  EXPECT_EQ(s.free_bytes, 1994752u);
  EXPECT_DOUBLE_EQ(s.ext_frag(), 1.0 - 1993728.0 / 1994752.0);
  al.free_raw(d);
  s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.largest_free_block, kSmallSeg);
  EXPECT_DOUBLE_EQ(s.slack(), 1.0);
  EXPECT_DOUBLE_EQ(s.ext_frag(), 0.0);
  EXPECT_EQ(al.empty_cache(), kSmallSeg);
  s = al.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.num_segments, 0u);
  EXPECT_DOUBLE_EQ(s.slack(), 0.0);  // nothing reserved
  EXPECT_EQ(s.num_allocs, 6u);
  EXPECT_EQ(s.num_frees, 6u);
}

TEST(CachingAllocator, LargeRequestGetsRoundedSegmentWithoutSplit) {
  HostBacking host;
  CachingAllocator al(host);
  // 11 MiB + 1 -> 11534848 B; segment rounded to 2 MiB = 12 MiB; the 1048064 B left is <= 1 MiB.
  Allocation x = al.allocate(11 * MiB + 1, AllocationTag::workspace);
  auto s = al.stats();
  EXPECT_EQ(s.reserved_bytes, 12 * MiB);
  EXPECT_EQ(s.allocated_bytes, 12 * MiB);
  EXPECT_EQ(s.tag(AllocationTag::workspace).requested_bytes, 11 * MiB + 1);
  EXPECT_EQ(s.free_bytes, 0u);
  EXPECT_DOUBLE_EQ(s.slack(), 0.0);
}

TEST(CachingAllocator, SmallRequestsNeverUseLargePoolBlocks) {
  HostBacking host;
  CachingAllocator al(host);
  Allocation big =
      al.allocate(3 * MiB, AllocationTag::activation);  // 20 MiB segment, 17 MiB free tail
  EXPECT_EQ(al.stats().num_segments, 1u);
  Allocation small = al.allocate(KiB, AllocationTag::activation);
  auto s = al.stats();
  EXPECT_EQ(s.num_segments, 2u);
  EXPECT_EQ(s.reserved_bytes, 22 * MiB);
  EXPECT_TRUE(addr(small.data()) < addr(big.data()) ||
              addr(small.data()) >= addr(big.data()) + 20 * MiB);
}

TEST(CachingAllocator, BestFitBreaksTiesByLowestAddress) {
  HostBacking host;
  CachingAllocator al(host);
  void* x1 = al.allocate_raw(4096, AllocationTag::other);
  void* s1 = al.allocate_raw(512, AllocationTag::other);
  void* x2 = al.allocate_raw(4096, AllocationTag::other);
  void* s2 = al.allocate_raw(512, AllocationTag::other);
  al.free_raw(x1);  // freed first: a LIFO cache would hand back x2
  al.free_raw(x2);
  EXPECT_EQ(al.allocate_raw(4096, AllocationTag::other), x1);
  EXPECT_EQ(al.allocate_raw(4096, AllocationTag::other), x2);
  EXPECT_EQ(al.stats().num_backing_allocs, 1u);
  for (void* p : {x1, x2, s1, s2}) al.free_raw(p);
  EXPECT_EQ(al.stats().allocated_bytes, 0u);
}

TEST(CachingAllocator, ReuseDoesNotTouchTheBacking) {
  HostBacking host;
  CachingAllocator al(host);
  for (int step = 0; step < 5; ++step) {
    Allocation p = al.allocate(8 * MiB, AllocationTag::param);
    Allocation g = al.allocate(300 * KiB, AllocationTag::grad);
    EXPECT_NE(p.data(), nullptr);
  }
  auto s = al.stats();
  EXPECT_EQ(s.num_backing_allocs, 2u);  // one 20 MiB and one 2 MiB segment, reused each step
  EXPECT_EQ(s.num_allocs, 10u);
  EXPECT_EQ(s.allocated_bytes, 0u);
}

TEST(CachingAllocator, AllocationHandleIsMoveOnlyOwner) {
  HostBacking host;
  CachingAllocator al(host);
  Allocation empty = al.allocate(0, AllocationTag::other);
  EXPECT_FALSE(empty);
  EXPECT_EQ(al.stats().num_allocs, 0u);
  {
    Allocation a = al.allocate(1000, AllocationTag::master);
    ASSERT_TRUE(a);
    EXPECT_EQ(a.size(), 1000u);
    EXPECT_EQ(a.tag(), AllocationTag::master);
    Allocation b = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    EXPECT_EQ(al.stats().tag(AllocationTag::master).live_allocations, 1u);
    Allocation c = al.allocate(2000, AllocationTag::adam_m);
    c = std::move(b);  // frees the 2000-byte block, takes over the 1000-byte one
    auto s = al.stats();
    EXPECT_EQ(s.tag(AllocationTag::adam_m).live_allocations, 0u);
    EXPECT_EQ(s.tag(AllocationTag::master).requested_bytes, 1000u);
    EXPECT_EQ(c.data_as<char>(), static_cast<char*>(c.data()));
  }
  EXPECT_EQ(al.stats().allocated_bytes, 0u);
  EXPECT_EQ(al.stats().num_frees, 2u);
}

TEST(CachingAllocator, ForeignPointerAndDoubleFreeAreRefused) {
  HostBacking host;
  CachingAllocator al(host);
  int local = 0;
  EXPECT_THROW(al.free_raw(&local), PreconditionError);
  void* p = al.allocate_raw(64, AllocationTag::other);
  al.free_raw(p);
  EXPECT_THROW(al.free_raw(p), PreconditionError);
  EXPECT_NO_THROW(al.free_raw(nullptr));
}

TEST(CachingAllocator, LimitReleasesCacheThenRaisesClearOom) {
  HostBacking host;
  CachingAllocatorConfig cfg;
  cfg.medium_segment_bytes = 0;  // large segments are the request rounded to 2 MiB
  cfg.reserved_limit = 5 * MiB;
  CachingAllocator al(host, cfg);

  al.free_raw(al.allocate_raw(KiB, AllocationTag::other));  // leaves a cached 2 MiB small segment
  EXPECT_EQ(al.stats().reserved_bytes, 2 * MiB);
  // 3 MiB needs a 4 MiB segment: 2 + 4 > 5, so the cached segment goes first (one retry).
  Allocation y = al.allocate(3 * MiB, AllocationTag::activation);
  auto s = al.stats();
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.reserved_bytes, 4 * MiB);
  EXPECT_EQ(s.allocated_bytes, 4 * MiB);  // the 1 MiB tail is not split off
  EXPECT_EQ(s.num_backing_frees, 1u);

  // 2 MiB more needs a new 2 MiB segment: 4 + 2 > 5 and nothing is cached.
  try {
    al.allocate_raw(2 * MiB, AllocationTag::grad);
    FAIL() << "no OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("limit would be exceeded"), std::string::npos) << m;
    EXPECT_NE(m.find("requested 2.00 MiB (2097152 B) [tag grad]"), std::string::npos) << m;
    EXPECT_NE(m.find("new segment of 2.00 MiB (2097152 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("allocated 4.00 MiB (4194304 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved 4.00 MiB (4194304 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("limit 5.00 MiB (5242880 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("on cpu"), std::string::npos) << m;
  }
  s = al.stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.reserved_bytes, 4 * MiB);
  EXPECT_EQ(s.tag(AllocationTag::grad).live_allocations, 0u);

  // Once y is gone its 4 MiB segment serves 2 MiB by splitting (tail 2 MiB > 1 MiB): no new
  // segment.
  y.reset();
  Allocation z = al.allocate(2 * MiB, AllocationTag::grad);
  s = al.stats();
  EXPECT_EQ(s.num_backing_allocs, 2u);
  EXPECT_EQ(s.allocated_bytes, 2 * MiB);
  EXPECT_EQ(s.largest_free_block, 2 * MiB);
}

TEST(CachingAllocator, BackingRefusalReleasesCacheAndRetries) {
  BudgetBacking budget(4 * MiB);
  {
    CachingAllocatorConfig cfg;
    cfg.medium_segment_bytes = 0;
    CachingAllocator al(budget, cfg);
    al.free_raw(al.allocate_raw(KiB, AllocationTag::other));    // 2 MiB cached
    Allocation y = al.allocate(3 * MiB, AllocationTag::other);  // 4 MiB: refused, release, retry
    EXPECT_EQ(budget.refusals(), 1);
    EXPECT_EQ(al.stats().num_alloc_retries, 1u);
    EXPECT_EQ(budget.outstanding(), 4 * MiB);
    try {
      al.allocate_raw(KiB, AllocationTag::comm);  // needs 2 MiB more; nothing cached to release
      FAIL() << "no OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(e.message().find("backing has no memory left"), std::string::npos) << e.what();
      EXPECT_NE(e.message().find("(budget backing)"), std::string::npos) << e.what();
      EXPECT_NE(e.message().find("limit none"), std::string::npos) << e.what();
    }
    EXPECT_EQ(al.stats().num_alloc_retries, 1u);
    y.reset();
    Allocation z = al.allocate(3 * MiB, AllocationTag::other);  // cached again: no backing call
    EXPECT_EQ(al.stats().num_backing_allocs, 2u);
  }
  // The allocator's destructor returns cached segments.
  EXPECT_EQ(budget.outstanding(), 0u);
}

// Several threads allocate and free concurrently, each stamping its blocks with a pattern unique to
// (thread, allocation) and checking it before the free: overlapping live blocks would overwrite it.
TEST(CachingAllocator, ConcurrentUseKeepsBlocksDisjointAndStatsConsistent) {
  HostBacking host;
  CachingAllocator al(host);
  constexpr int kThreads = 4;
  constexpr int kIters = 1500;
  constexpr std::size_t kMaxLive = 8;
  std::atomic<int> failures{0};

  auto worker = [&](int tid) {
    std::mt19937_64 rng(1234 + tid);
    struct Live {
      Allocation a;
      std::uint64_t stamp;
    };
    std::vector<Live> live;
    auto stamp_at = [](const Allocation& a, std::uint64_t stamp, bool check) {
      auto* bytes = a.data_as<unsigned char>();
      bool ok = true;
      // One word every 512 B (the rounding unit) and the last word: any overlap hits one. The
      // strided words stop short of the last one so the two never overwrite each other.
      for (std::size_t off = 0; off + 16 <= a.size(); off += 512) {
        if (check) {
          std::uint64_t v;
          std::memcpy(&v, bytes + off, 8);
          ok = ok && v == stamp + off;
        } else {
          const std::uint64_t v = stamp + off;
          std::memcpy(bytes + off, &v, 8);
        }
      }
      if (a.size() >= 8) {
        const std::size_t off = a.size() - 8;
        if (check) {
          std::uint64_t v;
          std::memcpy(&v, bytes + off, 8);
          ok = ok && v == ~stamp;
        } else {
          const std::uint64_t v = ~stamp;
          std::memcpy(bytes + off, &v, 8);
        }
      }
      return ok;
    };
    for (int i = 0; i < kIters; ++i) {
      const bool do_alloc = live.size() < kMaxLive && (live.empty() || rng() % 3 != 0);
      if (do_alloc) {
        const unsigned r = rng() % 100;
        std::size_t bytes = r < 70   ? 8 + rng() % (64 * KiB)       // small pool
                            : r < 97 ? MiB + 1 + rng() % (3 * MiB)  // medium tier
                                     : 10 * MiB + rng() % MiB;      // large, own segment
        const auto tag = static_cast<AllocationTag>(tid % kNumAllocationTags);
        Allocation a = al.allocate(bytes, tag);
        if (addr(a.data()) % 256 != 0) ++failures;
        const std::uint64_t stamp = (std::uint64_t(tid + 1) << 48) | (std::uint64_t(i) << 24);
        stamp_at(a, stamp, false);
        live.push_back({std::move(a), stamp});
      } else {
        const std::size_t k = rng() % live.size();
        if (!stamp_at(live[k].a, live[k].stamp, true)) ++failures;
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));  // frees through ~Allocation
      }
    }
    for (auto& l : live)
      if (!stamp_at(l.a, l.stamp, true)) ++failures;
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0);
  auto s = al.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_GT(s.num_allocs, std::uint64_t{kThreads});
  for (const TagStats& t : s.by_tag) {
    EXPECT_EQ(t.allocated_bytes, 0u);
    EXPECT_EQ(t.live_allocations, 0u);
  }
  EXPECT_EQ(s.free_bytes, s.reserved_bytes);
  EXPECT_LE(s.largest_free_block, s.reserved_bytes);
  EXPECT_GE(s.peak_reserved_bytes, s.reserved_bytes);
  EXPECT_EQ(s.num_backing_allocs - s.num_backing_frees, s.num_segments);
  // With nothing live, every segment is whole again after coalescing, so empty_cache frees them
  // all.
  EXPECT_EQ(al.empty_cache(), s.reserved_bytes);
  s = al.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.num_segments, 0u);
  EXPECT_EQ(s.num_backing_allocs, s.num_backing_frees);
}

}  // namespace
}  // namespace hzp
