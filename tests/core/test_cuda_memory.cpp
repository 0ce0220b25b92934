// GPU tests of core's CUDA side: CudaBacking under the caching allocator (the same statistics and tags as
// on the host), the ring pool in device memory, host/device copies and zero fills on a stream, and
// stream/event ordering with CUDA-event timing. Exits 77 without a GPU (gpu_test_main.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/ring_pool.hpp"
#include "hzp/core/stream.hpp"

namespace hzp {
namespace {

TEST(CudaBacking, AllocatorStatisticsAndTagsMeanWhatTheyMeanOnTheHost) {
  CudaBacking backing(0);
  EXPECT_EQ(backing.device(), Device::cuda(0));
  EXPECT_EQ(backing.name(), "cuda");
  CachingAllocator alloc(backing);
  EXPECT_EQ(alloc.device(), Device::cuda(0));
  {
    Allocation a = alloc.allocate(1000, AllocationTag::param);
    Allocation b = alloc.allocate(std::size_t{3} << 20, AllocationTag::grad);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 256, 0u);
    const AllocatorStats s = alloc.stats();
    EXPECT_EQ(s.tag(AllocationTag::param).requested_bytes, 1000u);
    EXPECT_EQ(s.tag(AllocationTag::grad).requested_bytes, std::size_t{3} << 20);
    EXPECT_EQ(s.requested_bytes, 1000u + (std::size_t{3} << 20));
    EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
    EXPECT_EQ(s.num_backing_allocs, 2u);  // one small segment, one medium segment
  }
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
  EXPECT_GT(alloc.empty_cache(), 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
}

TEST(CudaBacking, OutOfMemoryIsReportedAsNullSoTheAllocatorCanRetry) {
  CudaBacking backing(0);
  EXPECT_EQ(backing.allocate(std::size_t{1} << 50), nullptr);  // 1 PiB
  void* p = backing.allocate(4096);  // and the device still works
  ASSERT_NE(p, nullptr);
  backing.deallocate(p, 4096);
}

TEST(CudaMemory, CopiesAndZeroFillsRoundTripThroughTheDevice) {
  CudaBacking backing(0);
  CachingAllocator alloc(backing);
  Stream s(Device::cuda(0));
  std::vector<float> host(10000);
  std::iota(host.begin(), host.end(), 1.0f);
  Allocation d = alloc.allocate(host.size() * sizeof(float), AllocationTag::other);
  copy_bytes(d.data(), Device::cuda(0), host.data(), Device::cpu(), host.size() * sizeof(float), s);
  zero_bytes(d.data_as<float>() + 10, 5 * sizeof(float), s);
  std::vector<float> back(host.size(), -1.0f);
  copy_bytes(back.data(), Device::cpu(), d.data(), Device::cuda(0), back.size() * sizeof(float), s);
  s.ref().synchronize();
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], (i >= 10 && i < 15) ? 0.0f : host[i]) << i;
}

TEST(CudaRingPool, SlotsAreCarvedFromOneDeviceRegion) {
  CudaBacking backing(0);
  CachingAllocator alloc(backing);
  RingPool pool(alloc, {{"all_gather", 1 << 20}, {"reduce_scatter", 1 << 20}});
  EXPECT_EQ(pool.device(), Device::cuda(0));
  EXPECT_EQ(alloc.stats().tag(AllocationTag::comm).requested_bytes, std::size_t{2} << 20);
  const RingId ag = pool.ring_id("all_gather");
  RingSlot a = pool.acquire(ag, 600 << 10);
  EXPECT_FALSE(pool.try_acquire(ag, 600 << 10));  // the ring is full
  Stream s(Device::cuda(0));
  zero_bytes(a.data(), a.size(), s);  // the slot is device memory
  s.ref().synchronize();
  a.release();
  EXPECT_TRUE(pool.try_acquire(ag, 600 << 10));
}

TEST(CudaStream, EventsOrderStreamsAndTimeDeviceWork) {
  CudaBacking backing(0);
  CachingAllocator alloc(backing);
  Stream producer(Device::cuda(0)), consumer(Device::cuda(0));
  const std::size_t n = std::size_t{64} << 20;
  Allocation a = alloc.allocate(n, AllocationTag::other), b = alloc.allocate(n, AllocationTag::other);
  TimedEvent t0(Device::cuda(0)), t1(Device::cuda(0));
  Event ready(Device::cuda(0));
  std::vector<unsigned char> host(n, 7), back(16, 0);
  t0.record(producer);
  copy_bytes(a.data(), Device::cuda(0), host.data(), Device::cpu(), n, producer);
  t1.record(producer);
  ready.record(producer);
  ready.wait(consumer);  // the consumer's copy must see the producer's data
  copy_bytes(b.data(), Device::cuda(0), a.data(), Device::cuda(0), n, consumer);
  copy_bytes(back.data(), Device::cpu(), b.data(), Device::cuda(0), back.size(), consumer);
  consumer.ref().synchronize();
  for (unsigned char c : back) EXPECT_EQ(c, 7);
  t1.synchronize();
  EXPECT_GT(TimedEvent::elapsed_ms(t0, t1), 0.0);
  EXPECT_TRUE(ready.query());
}

}  // namespace
}  // namespace hzp
