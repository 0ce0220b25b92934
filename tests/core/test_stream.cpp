// Streams and events on the CPU: synchronous semantics, timed events, refs that cannot be forged.
#include <gtest/gtest.h>

#include <thread>
#include <type_traits>

#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"

namespace hzp {
namespace {

static_assert(!std::is_constructible_v<StreamRef, int>);
static_assert(!std::is_constructible_v<StreamRef, std::nullptr_t>);
static_assert(std::is_trivially_copyable_v<StreamRef>);
static_assert(!std::is_copy_constructible_v<Stream>);
static_assert(std::is_nothrow_move_constructible_v<Stream>);
static_assert(!std::is_copy_constructible_v<Event>);

TEST(Stream, HostStreamIsAlwaysIdle) {
  Stream s;
  EXPECT_TRUE(s.ref().query());
  EXPECT_NO_THROW(s.ref().synchronize());
  EXPECT_EQ(s.device(), Device::cpu());
  Stream moved = std::move(s);
  EXPECT_TRUE(moved.ref().query());
}

TEST(Event, RecordWaitQueryOnCpu) {
  Stream a, b;
  Event e;
  e.record(a);
  e.wait(b);
  EXPECT_TRUE(e.query());
  EXPECT_NO_THROW(e.synchronize());
}

TEST(TimedEvent, MeasuresHostTime) {
  Stream s;
  TimedEvent t0, t1;
  EXPECT_THROW(TimedEvent::elapsed_ms(t0, t1), PreconditionError);  // not recorded yet
  t0.record(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  t1.record(s);
  const double ms = TimedEvent::elapsed_ms(t0, t1);
  EXPECT_GE(ms, 19.0);
}

TEST(Device, CudaAbsenceIsReportedNotFatal) {
  // Without a GPU the count is 0 whatever the runtime says; with one it is positive.
  EXPECT_GE(cuda_device_count(), 0);
  if (!cuda_compiled()) {
    EXPECT_THROW(Stream(Device::cuda(0)), UnsupportedError);
  } else if (cuda_device_count() == 0) {
    EXPECT_THROW(Stream(Device::cuda(0)), CudaError);  // a clear error, not a crash
  }
  EXPECT_EQ(to_string(Device::cuda(3)), "cuda:3");
}

}  // namespace
}  // namespace hzp
