// Clocks: thread CPU time tells computing from sleeping.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "hzp/core/clock.hpp"

namespace hzp {
namespace {

TEST(Clock, SleepCostsWallTimeButNoThreadCpu) {
  Stopwatch sw;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(sw.wall(), 0.049);
  EXPECT_LT(sw.cpu(), 0.02);
}

TEST(Clock, SpinningCostsThreadCpu) {
  Stopwatch sw;
  volatile double x = 0;
  while (sw.wall() < 0.05) x = x + 1.0;
  EXPECT_GT(sw.cpu(), 0.005);  // lower bound only: the machine may deschedule us
  EXPECT_GE(wall_seconds(), 0.0);
  EXPECT_GT(unix_seconds(), 1.7e9);
}

}  // namespace
}  // namespace hzp
