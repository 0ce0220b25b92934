// One GoogleTest comparison of two simulated steps, field by field and to the bit, for the tests that hold a second
// way of simulating (folded roles, joined ranks) against the plain per-rank simulation.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "hzp/harness/step_simulator.hpp"

namespace hzp::harness::test {

inline void expect_same_step(const SimulatedStep& a, const SimulatedStep& b, const std::string& what) {
  EXPECT_EQ(a.step_s, b.step_s) << what;
  EXPECT_EQ(a.compute_s, b.compute_s) << what;
  EXPECT_EQ(a.forward_s, b.forward_s) << what;
  EXPECT_EQ(a.backward_s, b.backward_s) << what;
  EXPECT_EQ(a.exposed_comm_s, b.exposed_comm_s) << what;
  EXPECT_EQ(a.join_wait_s, b.join_wait_s) << what;
  EXPECT_EQ(a.pipeline_wait_s, b.pipeline_wait_s) << what;
  EXPECT_EQ(a.comm_time_s, b.comm_time_s) << what;
  EXPECT_EQ(a.count, b.count) << what;
  EXPECT_EQ(a.bytes, b.bytes) << what;
  EXPECT_EQ(a.time_s, b.time_s) << what;
}

}  // namespace hzp::harness::test
