// When hzpbench simulate's params stream gathers on a pipeline stage (step_simulator.hpp): as AsyncComm does, the
// step starts with the first `prefetch` gathering calls queued, and the window moves on when compute takes a unit's
// parameters, which a stage does only after its input arrived (PipelineStage::run receives first). A hand-built
// two-stage step with a closed form, worked out below; nothing depends on this machine.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"

namespace hzp::harness {
namespace {

using schedulers::Action;
using schedulers::CommPlace;
using schedulers::CommStream;
using schedulers::StepDescription;
using schedulers::StepEvent;

constexpr double kGbps = 1.0;                     // one link level (both ranks on one node), no latency
constexpr std::uint64_t kMessageBytes = 4000000;  // M = 4 ms
constexpr std::uint64_t kGatherBytes = 2000000;   // G = 2 ms (a gather over two ranks: one ring step)
constexpr double kF0 = 1e-3, kF1 = 0.5e-3, kF2 = 0.7e-3, kB = 1e-3;

StepEvent event(coll::CollOp op, CommStream stream, int call, CommPlace place, std::vector<int> members, int peer,
                std::uint64_t bytes) {
  StepEvent e;
  e.call = call;
  e.stream = stream;
  e.place = place;
  e.collective.op = op;
  e.collective.group = stream == CommStream::pipeline ? "pp" : "z3";
  e.collective.group_size = 2;
  e.collective.calls = 1;
  e.collective.elements = static_cast<std::int64_t>(bytes / 4);
  if (op != coll::CollOp::recv) e.collective.bytes[0] = bytes;
  e.members = std::move(members);
  e.peer = peer;
  return e;
}

// Rank 0 is stage 0 (unit 0); rank 1 stage 1 (units 1 and 2), whose units' parameters come from the params stream
// (a gather each, over a group whose other member, rank 2, is elsewhere), prefetch 1. One micro-batch.
StepDescription describe(int rank) {
  StepDescription d;
  d.plan.rank = rank;
  d.plan.world_size = 3;
  const std::vector<int> pipeline{0, 1};
  if (rank == 0) {
    const Action f{Action::Kind::forward, 0, 0, 1}, b{Action::Kind::backward, 0, 0, 1};
    d.actions = {f, b};
    d.calls = {{f, 0}, {b, 0}};
    d.events.push_back(event(coll::CollOp::send, CommStream::pipeline, 0, CommPlace::after_unit, pipeline, 1, kMessageBytes));
    d.events.push_back(event(coll::CollOp::recv, CommStream::pipeline, 1, CommPlace::before_unit, pipeline, 1, kMessageBytes));
    return d;
  }
  const Action f{Action::Kind::forward, 0, 1, 3}, b{Action::Kind::backward, 0, 1, 3};
  d.actions = {f, b};
  d.calls = {{f, 1}, {f, 2}, {b, 2}, {b, 1}};
  d.prefetch = 1;
  d.events.push_back(event(coll::CollOp::recv, CommStream::pipeline, 0, CommPlace::before_unit, pipeline, 0, kMessageBytes));
  for (int call : {0, 1})
    d.events.push_back(event(coll::CollOp::all_gather, CommStream::params, call, CommPlace::before_unit, {1, 2}, -1,
                             kGatherBytes));
  d.events.push_back(event(coll::CollOp::send, CommStream::pipeline, 3, CommPlace::after_unit, pipeline, 0, kMessageBytes));
  return d;
}

TEST(PrefetchWindow, AStageTakesItsParametersAfterItsInput) {
  const StepDescription d0 = describe(0), d1 = describe(1);
  SimulatorLinks l;
  l.links.enabled = true;
  l.links.intra = {0, kGbps};
  l.links.inter = {0, kGbps};
  l.ranks_per_node = 0;
  l.small_message_bytes = 0;
  const UnitTimes t{{kF0, kF1, kF2}, {kB, kB, kB}, {}, {}};
  const std::vector<SimulatedStep> st = simulate_steps({&d0, &d1}, t, l);
  const double m = static_cast<double>(kMessageBytes) / (kGbps * 1e9), g = static_cast<double>(kGatherBytes) / (kGbps * 1e9);
  // Worked by hand. Stage 1's first gather runs from 0 to G, queued at the step's start; its input arrives at
  // R = F0 + M > G. Taking unit 1's parameters then lets the second gather start: R to R + G. Unit 1 computes from R
  // to R + F1 < R + G, so unit 2 waits G − F1 for its gather: exposed. (Had the stage reached unit 1 before its
  // input, the window would have moved at 0: compute waits G for the first gather, counted exposed, then the rest of R;
  // had the first gather waited for the input too, 2G − F1.)
  const double r = kF0 + m;
  ASSERT_GT(r, 2 * g);
  ASSERT_GT(g, kF1);
  const SimulatedStep& s1 = st[1];
  EXPECT_NEAR(s1.exposed_comm_s, g - kF1, 1e-12);
  EXPECT_NEAR(s1.pipeline_wait_s, r + m, 1e-12);  // its input, then its own send's drain
  EXPECT_NEAR(s1.step_s, r + g + kF2 + 2 * kB + m, 1e-12);
}

}  // namespace
}  // namespace hzp::harness
