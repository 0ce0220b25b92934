// One GoogleTest comparison of two simulated steps, field by field and to the bit, for the tests that hold a second
// way of simulating (folded roles, joined ranks) against the plain per-rank simulation, and the links they run on.
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

// The links the packing tests simulate on: the emulator's node interface (one per node, shared by its ranks) unless
// `nic_per_rank` (the profiles' NIC per device), slow across nodes so that queueing there shows.
inline SimulatorLinks slow_links(int per_node = 2, bool nic_per_rank = false) {
  SimulatorLinks l;
  l.links.enabled = true;
  l.links.intra = {10, 1};
  l.links.inter = {10, 0.1};
  l.ranks_per_node = per_node;
  l.small_message_bytes = 0;
  l.nic_per_rank = nic_per_rank;
  return l;
}

}  // namespace hzp::harness::test
