// hzpbench simulate's step model (step_simulator.hpp) on fixed unit times and links, so nothing here depends on
// this machine's speed: the step description's calls sum to the plan's rows, the simulated bytes per op and level
// are the plan's, a ring's modelled duration is its closed form, a step without overlap is the sum of its parts,
// free links leave the compute alone, and zero3 exposes more communication than asynchzp's async threads.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::harness {
namespace {

using schedulers::PlanInputs;
using schedulers::StepDescription;

struct Tiny {
  workloads::ParamLayout layout;
  PlanInputs in;
};

// tiny at W = 4 in two nodes of 2, 8 micro-batches (2 per rank), rings everywhere (no small-message algorithms).
Tiny tiny(int rank, std::string_view scheduler) {
  const auto& preset = workloads::model_preset("tiny");
  Tiny s{workloads::llama_layout(preset.model), {}};
  s.in.train = preset.train;
  s.in.train.global_batch = 8;
  s.in.train.micro_batch_size = 1;
  s.in.world_size = 4;
  s.in.ranks_per_node = 2;
  s.in.rank = rank;
  s.in.small_message_bytes = 0;
  if (scheduler == "hsdp") s.in.options.group_size = 2;
  s.in.options.z1 = 4;
  s.in.options.z2 = 2;
  s.in.options.z3 = 2;
  return s;
}

UnitTimes times(int units, double f, double b) {
  return {std::vector<double>(static_cast<std::size_t>(units), f), std::vector<double>(static_cast<std::size_t>(units), b)};
}

SimulatorLinks links(double latency_us, double intra_gbps, double inter_gbps) {
  SimulatorLinks l;
  l.links.enabled = true;
  l.links.intra = {latency_us, intra_gbps};
  l.links.inter = {latency_us, inter_gbps};
  l.ranks_per_node = 2;
  l.small_message_bytes = 0;
  return l;
}

const char* const kSchedulers[] = {"ddp", "zero1", "zero2", "zero3", "hsdp", "asynchzp"};

TEST(StepDescription, CallsSumToThePlanRows) {
  for (const char* name : kSchedulers)
    for (bool async : {true, false})
      for (int rank : {0, 3}) {
        Tiny s = tiny(rank, name);
        s.in.layout = &s.layout;
        s.in.options.async = async;
        const StepDescription d = schedulers::describe_step(name, s.in);
        std::map<std::tuple<int, std::string, std::string>, std::array<std::uint64_t, 4>> sum;
        for (const schedulers::StepEvent& e : d.events) {
          auto& v = sum[{static_cast<int>(e.collective.op), e.collective.group, e.collective.when}];
          v[0] += static_cast<std::uint64_t>(e.collective.calls);
          v[1] += static_cast<std::uint64_t>(e.collective.elements);
          v[2] += e.collective.bytes[0];
          v[3] += e.collective.bytes[1];
        }
        ASSERT_EQ(sum.size(), d.plan.collectives.size()) << name;
        for (const schedulers::PlannedCollective& c : d.plan.collectives) {
          const auto& v = sum.at({static_cast<int>(c.op), c.group, c.when});
          EXPECT_EQ(v[0], static_cast<std::uint64_t>(c.calls)) << name << " " << c.group << " " << c.when;
          EXPECT_EQ(v[1], static_cast<std::uint64_t>(c.elements)) << name << " " << c.group;
          EXPECT_EQ(v[2], c.bytes[0]) << name << " " << c.group;
          EXPECT_EQ(v[3], c.bytes[1]) << name << " " << c.group;
        }
        // Two micro-batches of a forward and a backward over every unit.
        EXPECT_EQ(d.calls.size(), static_cast<std::size_t>(2 * 2 * s.layout.num_units())) << name;
        // The simulated step moves the plan's bytes per op and level.
        const SimulatedStep st = simulate_step(d, times(s.layout.num_units(), 0.01, 0.02), links(10, 1, 0.1));
        std::array<std::array<std::uint64_t, coll::kNumLinkLevels>, coll::kNumCollOps> want{};
        for (const schedulers::PlannedCollective& c : d.plan.collectives)
          for (std::size_t lv = 0; lv < coll::kNumLinkLevels; ++lv) want[static_cast<std::size_t>(c.op)][lv] += c.bytes[lv];
        for (int op = 0; op < coll::kNumCollOps; ++op)
          for (int lv = 0; lv < coll::kNumLinkLevels; ++lv)
            EXPECT_EQ(static_cast<std::uint64_t>(st.bytes[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)]),
                      want[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)])
                << name << " op " << op << " level " << lv;
      }
}

// A ring all-gather of n fp32 elements per rank over p ranks on one node: p − 1 rounds of latency + 4n / bandwidth.
TEST(StepSimulator, RingAllGatherIsItsClosedForm) {
  schedulers::PlannedCollective c;
  c.op = coll::CollOp::all_gather;
  c.group = "g";
  c.dtype = DType::f32;
  c.calls = 1;
  c.elements = 1000;
  c.bytes = {3 * 1000 * 4, 0};
  SimulatorLinks l = links(20, 2, 0.5);
  l.ranks_per_node = 4;
  const coll::CollectiveModel m = model_planned_call(c, {0, 1, 2, 3}, 1, l);
  EXPECT_DOUBLE_EQ(m.duration_s, 3 * (20e-6 + 4000 / 2e9));
  // Over two nodes of 2 the two inter-node hops set each round: latency + 4n / the inter bandwidth.
  l.ranks_per_node = 2;
  EXPECT_DOUBLE_EQ(model_planned_call(c, {0, 1, 2, 3}, 1, l).duration_s, 3 * (20e-6 + 4000 / 0.5e9));
}

// zero3 waits for every collective where it is declared: the step is its compute plus each call's duration.
TEST(StepSimulator, NoOverlapIsTheSumOfItsParts) {
  for (int rank : {0, 1}) {
    Tiny s = tiny(rank, "zero3");
    s.in.layout = &s.layout;
    const StepDescription d = schedulers::describe_step("zero3", s.in);
    const int units = s.layout.num_units();
    const SimulatorLinks l = links(10, 1, 0.1);
    const SimulatedStep st = simulate_step(d, times(units, 0.01, 0.03), l);
    double comm = 0;
    for (const schedulers::StepEvent& e : d.events) {
      ASSERT_EQ(e.stream, schedulers::CommStream::compute);
      comm += static_cast<double>(e.collective.calls) * model_planned_call(e.collective, e.members, rank, l).duration_s;
    }
    const double compute = 2 * units * (0.01 + 0.03);
    EXPECT_NEAR(st.compute_s, compute, 1e-12);
    EXPECT_NEAR(st.step_s, compute + comm, 1e-9);
    EXPECT_NEAR(st.exposed_comm_s, comm, 1e-9);
    EXPECT_NEAR(st.comm_time_s, comm, 1e-9);
  }
}

// ddp's buckets on the gradients stream, each far shorter than a unit's backward: every bucket but those launched
// by the step's last unit call hides behind the backward, so the step is the compute plus that tail and the step
// end's own calls (fully overlapped: the max of compute and communication, window by window).
TEST(StepSimulator, FullyOverlappedLeavesOnlyTheTail) {
  Tiny s = tiny(0, "ddp");
  s.in.layout = &s.layout;
  s.in.options.bucket_mb = 1e-6;  // a bucket per unit
  const StepDescription d = schedulers::describe_step("ddp", s.in);
  const int units = s.layout.num_units();
  const SimulatorLinks l = links(10, 1, 0.1);
  const SimulatedStep st = simulate_step(d, times(units, 0.01, 1.0), l);
  const int last = static_cast<int>(d.calls.size()) - 1;
  double tail = 0, buckets = 0;
  for (const schedulers::StepEvent& e : d.events) {
    const double t = static_cast<double>(e.collective.calls) * model_planned_call(e.collective, e.members, 0, l).duration_s;
    if (e.call == last || e.call < 0) tail += t;
    if (e.call >= 0) {
      ASSERT_EQ(e.stream, schedulers::CommStream::gradients);
      ASSERT_LT(t, 1.0);  // shorter than the backward it hides behind
      ++buckets;
    }
  }
  ASSERT_GT(buckets, 2);
  EXPECT_NEAR(st.step_s, 2 * units * 1.01 + tail, 1e-9);
  EXPECT_NEAR(st.exposed_comm_s, tail, 1e-9);
}

// With links that cost nothing every scheduler's step is its compute (fully overlapped or not).
TEST(StepSimulator, FreeLinksLeaveTheCompute) {
  for (const char* name : kSchedulers) {
    Tiny s = tiny(0, name);
    s.in.layout = &s.layout;
    const StepDescription d = schedulers::describe_step(name, s.in);
    const SimulatedStep st = simulate_step(d, times(s.layout.num_units(), 0.01, 0.02), links(0, 1e12, 1e12));
    EXPECT_NEAR(st.step_s, 2 * s.layout.num_units() * 0.03, 1e-6) << name;
    EXPECT_NEAR(st.exposed_comm_s, 0, 1e-6) << name;
  }
}

// The same compute and links: asynchzp's threads hide communication that zero3 waits for, and async hides more
// than asynchzp inline.
TEST(StepSimulator, AsyncExposesLessThanZero3) {
  const SimulatorLinks l = links(10, 0.5, 0.05);
  auto exposed = [&](const char* name, bool async) {
    Tiny s = tiny(0, name);
    s.in.layout = &s.layout;
    s.in.options.async = async;
    s.in.options.z1 = s.in.options.z2 = s.in.options.z3 = 4;  // zero3's sharding, on threads
    const StepDescription d = schedulers::describe_step(name, s.in);
    return simulate_step(d, times(s.layout.num_units(), 0.02, 0.04), l).exposed_comm_s;
  };
  const double z3 = exposed("zero3", false), inline_ = exposed("asynchzp", false), async = exposed("asynchzp", true);
  EXPECT_GT(z3, 0);
  EXPECT_NEAR(inline_, z3, 1e-9 * z3);  // z1 = z2 = z3 = W inline is zero3's step
  EXPECT_LT(async, 0.8 * z3);
}

}  // namespace
}  // namespace hzp::harness
