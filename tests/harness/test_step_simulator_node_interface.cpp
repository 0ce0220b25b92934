// The node's shared interface in hzpbench simulate's pipelines (step_simulator.hpp, NodeInterface): two replicas of
// a two-stage pipeline, one stage per node, send their boundary messages through one interface per node. Simulated
// together, the second replica's message queues behind the first's (the interface's bookings), so the
// replicas drift apart by one message time per stage; on the copies model both pay for both copies; with a NIC per
// rank neither waits. Ranks of one role (one description) reserve the clock each as its own description would.
// Hand-built descriptions and closed forms, worked out below; nothing depends on this machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "hzp/harness/role_descriptions.hpp"
#include "hzp/harness/step_fold.hpp"
#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"

namespace hzp::harness {
namespace {

using schedulers::Action;
using schedulers::CommPlace;
using schedulers::CommStream;
using schedulers::StepDescription;
using schedulers::StepEvent;

constexpr std::uint64_t kBytes = 4000;  // one boundary message
constexpr double kInterGbps = 0.5;      // so a message takes M = 8 µs between nodes, and nothing inside one
constexpr double kF0 = 1e-3, kB0 = 3e-3, kF1 = 2e-3, kB1 = 5e-3;  // unit 0 (stage 0) and unit 1 (stage 1)

StepEvent message(coll::CollOp op, int call, CommPlace place, std::vector<int> pipeline, int peer) {
  StepEvent e;
  e.call = call;
  e.stream = CommStream::pipeline;
  e.place = place;
  e.collective.op = op;
  e.collective.group = "pp";
  e.collective.group_size = 2;
  e.collective.calls = 1;
  e.collective.elements = kBytes / 4;
  if (op == coll::CollOp::send) e.collective.bytes[1] = kBytes;
  e.members = std::move(pipeline);
  e.peer = peer;
  return e;
}

// W = 4 in nodes of 2: stage 0 on node 0 (ranks 0, 1), stage 1 on node 1 (ranks 2, 3); pipelines {0, 2} and {1, 3}.
// One micro-batch: stage 0 runs F (unit 0), sends, receives the gradient, runs B; stage 1 receives, runs F and B
// (unit 1), sends the gradient back. No collective but the messages.
StepDescription describe(int rank) {
  const int stage = rank / 2, replica = rank % 2;
  const std::vector<int> pipeline{replica, replica + 2};
  StepDescription d;
  d.plan.rank = rank;
  d.plan.world_size = 4;
  const Action f{Action::Kind::forward, 0, stage, stage + 1}, b{Action::Kind::backward, 0, stage, stage + 1};
  d.actions = {f, b};
  d.calls = {{f, stage}, {b, stage}};
  const int peer = 1 - stage;
  if (stage == 0) {
    d.events.push_back(message(coll::CollOp::send, 0, CommPlace::after_unit, pipeline, peer));
    d.events.push_back(message(coll::CollOp::recv, 1, CommPlace::before_unit, pipeline, peer));
  } else {
    d.events.push_back(message(coll::CollOp::recv, 0, CommPlace::before_unit, pipeline, peer));
    d.events.push_back(message(coll::CollOp::send, 1, CommPlace::after_unit, pipeline, peer));
  }
  return d;
}

UnitTimes unit_times() { return {{kF0, kF1}, {kB0, kB1}, {}, {}}; }

SimulatorLinks node_links(bool nic_per_rank) {
  SimulatorLinks l;
  l.links.enabled = true;
  l.links.intra = {0, std::numeric_limits<double>::infinity()};
  l.links.inter = {0, kInterGbps};
  l.ranks_per_node = 2;
  l.small_message_bytes = 0;
  l.nic_per_rank = nic_per_rank;
  return l;
}

const double kM = static_cast<double>(kBytes) / (kInterGbps * 1e9);

// The earlier and the later of a stage's two replicas (which of them goes first is the order they are simulated in;
// the model's results are these two, whichever it is).
std::pair<SimulatedStep, SimulatedStep> replicas(const std::vector<SimulatedStep>& st, int stage) {
  SimulatedStep a = st[static_cast<std::size_t>(2 * stage)], b = st[static_cast<std::size_t>(2 * stage + 1)];
  if (a.step_s > b.step_s) std::swap(a, b);
  return {a, b};
}

TEST(NodeInterface, TheSecondReplicasMessagesQueueBehindTheFirsts) {
  std::vector<StepDescription> ds;
  for (int r = 0; r < 4; ++r) ds.push_back(describe(r));
  std::vector<const StepDescription*> all;
  for (const StepDescription& d : ds) all.push_back(&d);
  // Worked by hand. Both stage-0 replicas send at F0 on node 0's interface: one arrives at F0 + M, the other at
  // F0 + 2M. Each stage-1 replica then runs F1 + B1 and sends back on node 1's interface: the first at
  // F0 + M + F1 + B1 (arriving M later), the second at F0 + 2M + F1 + B1, when the interface is just free again.
  // Stage 1 ends once its send has left (its sends drain); stage 0 after B0 on the gradient.
  const double work1 = kF1 + kB1;
  const std::vector<SimulatedStep> shared = simulate_steps(all, unit_times(), node_links(false), NodeInterface::shared);
  const auto [s0_first, s0_second] = replicas(shared, 0);
  const auto [s1_first, s1_second] = replicas(shared, 1);
  EXPECT_NEAR(s1_first.pipeline_wait_s, kF0 + kM + kM, 1e-12);  // its input, then its own send's drain
  EXPECT_NEAR(s1_second.pipeline_wait_s, kF0 + 2 * kM + kM, 1e-12);
  EXPECT_NEAR(s1_first.step_s, kF0 + 2 * kM + work1, 1e-12);
  EXPECT_NEAR(s1_second.step_s, kF0 + 3 * kM + work1, 1e-12);
  EXPECT_NEAR(s0_first.pipeline_wait_s, 2 * kM + work1, 1e-12);
  EXPECT_NEAR(s0_second.pipeline_wait_s, 3 * kM + work1, 1e-12);
  EXPECT_NEAR(s0_first.step_s, kF0 + 2 * kM + work1 + kB0, 1e-12);
  EXPECT_NEAR(s0_second.step_s, kF0 + 3 * kM + work1 + kB0, 1e-12);
  for (const SimulatedStep& s : shared) EXPECT_NEAR(s.exposed_comm_s, 0, 1e-12);

  // The copies model (each pipeline alone): every message pays for both copies on its interface, 2M, and the
  // replicas stay alike.
  std::vector<SimulatedStep> copies(4);
  for (int replica = 0; replica < 2; ++replica) {
    const std::vector<SimulatedStep> st = simulate_steps({all[static_cast<std::size_t>(replica)],
                                                          all[static_cast<std::size_t>(replica + 2)]},
                                                         unit_times(), node_links(false));
    copies[static_cast<std::size_t>(replica)] = st[0];
    copies[static_cast<std::size_t>(replica + 2)] = st[1];
  }
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(copies[static_cast<std::size_t>(r)].step_s, kF0 + 4 * kM + work1 + (r < 2 ? kB0 : 0), 1e-12) << r;

  // A NIC per rank: nothing queues, every message takes M.
  const std::vector<SimulatedStep> own = simulate_steps(all, unit_times(), node_links(true), NodeInterface::shared);
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(own[static_cast<std::size_t>(r)].step_s, kF0 + 2 * kM + work1 + (r < 2 ? kB0 : 0), 1e-12) << r;

  // simulate_world gathers the pipelines that share a node and simulates them together, folded or not.
  for (const bool fold : {true, false}) {
    WorldStats stats;
    const std::vector<SimulatedStep> world = simulate_world(4, describe, unit_times(), node_links(false), fold, &stats);
    EXPECT_EQ(stats.ranks_simulated, 4);
    for (int r = 0; r < 4; ++r) {
      EXPECT_DOUBLE_EQ(world[static_cast<std::size_t>(r)].step_s, shared[static_cast<std::size_t>(r)].step_s) << r;
      EXPECT_DOUBLE_EQ(world[static_cast<std::size_t>(r)].pipeline_wait_s,
                       shared[static_cast<std::size_t>(r)].pipeline_wait_s) << r;
    }
  }
}

// One all-gather over {3, 1, 0, 2} at W = 4 in nodes of 2 (nodes 1 0 0 1 in the group's order), blocking before the
// only unit: seen from ranks 0 and 3 the group's node pattern is the same (A B B A), so they are one role, as are
// ranks 1 and 2 (A A B B); but rank 3 leads node 1's copy (the group's first member there) and rank 0 does not (rank 1
// leads node 0's). On the node's shared clock each node's copy is reserved once, by its leader: every rank ends at
// F0 + G, G the ring's three rounds of 2,000 bytes over the interface. Given the role's description (the joined
// simulation under packing), each rank must still reserve as its own description says; one call model per role,
// made by its leader (rank 3 joins last and goes first), has rank 0 book node 0 as well, and rank 1 then waits G.
constexpr std::uint64_t kGathered = 6000;

StepDescription gather_before_unit(int rank) {
  StepDescription d;
  d.plan.rank = rank;
  d.plan.world_size = 4;
  const Action f{Action::Kind::forward, 0, 0, 1};
  d.actions = {f};
  d.calls = {{f, 0}};
  StepEvent e;
  e.call = 0;
  e.stream = CommStream::compute;
  e.place = CommPlace::before_unit;
  e.collective.op = coll::CollOp::all_gather;
  e.collective.group = "g";
  e.collective.group_size = 4;
  e.collective.calls = 1;
  e.collective.elements = kGathered / 4;
  e.collective.bytes[1] = kGathered;  // each member's three rounds, two of the four hops between nodes
  e.members = std::vector<int>{3, 1, 0, 2};
  d.events.push_back(e);
  return d;
}

TEST(NodeInterface, ARolesRanksReserveTheClockAsTheirOwnDescriptionsSay) {
  std::vector<StepDescription> ds;
  std::vector<SimulatedRank> own, role;
  for (int r = 0; r < 4; ++r) ds.push_back(gather_before_unit(r));
  for (const StepDescription& d : ds) own.push_back({&d, {}});
  const RoleDescriptions roles(4, gather_before_unit, 2);
  ASSERT_EQ(roles.roles(), 2);  // {0, 3} and {1, 2}: each role holds a leader and a rank that is not
  for (int r = 0; r < 4; ++r) role.push_back(roles.rank(r, {}));
  const double g = 3 * (kGathered / 3.0) / (kInterGbps * 1e9);
  for (const auto* ranks : {&own, &role}) {
    const std::vector<SimulatedStep> st = simulate_joined(*ranks, unit_times(), node_links(false), NodeInterface::shared);
    for (int r = 0; r < 4; ++r)
      EXPECT_NEAR(st[static_cast<std::size_t>(r)].step_s, kF0 + g, 1e-12) << (ranks == &own ? "own" : "role") << " rank " << r;
  }
}

}  // namespace
}  // namespace hzp::harness
