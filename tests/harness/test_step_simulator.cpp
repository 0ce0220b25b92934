// hzpbench simulate's step model (step_simulator.hpp) on fixed unit times and links, so nothing here depends on
// this machine's speed: the step description's calls sum to the plan's rows, the simulated bytes per op and level
// are the plan's, a ring's modelled duration is its closed form, a step without overlap is the sum of its parts,
// free links leave the compute alone, and zero3 exposes more communication than asynchzp's async threads. With
// tensor, context and pipeline parallelism: tensor-parallel calls block inside the unit, ring attention hides K and V
// behind its blocks, and stages of equal work with free messages idle for the textbook bubble.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/pipeline_timeline.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/model_factory.hpp"
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
  return {std::vector<double>(static_cast<std::size_t>(units), f), std::vector<double>(static_cast<std::size_t>(units), b),
          {}, {}, {}};
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

// The description's calls, summed per (op, group, when), are the plan's rows: calls, elements and bytes per level.
void expect_events_sum_to_plan(const StepDescription& d, const std::string& name) {
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
}

// The simulated step of one rank moves its description's planned bytes, per op and level.
void expect_simulated_bytes_are_the_plans(const SimulatedStep& st, const StepDescription& d, const std::string& what) {
  std::array<std::array<std::uint64_t, coll::kNumLinkLevels>, coll::kNumCollOps> want{};
  for (const schedulers::PlannedCollective& c : d.plan.collectives)
    for (std::size_t lv = 0; lv < coll::kNumLinkLevels; ++lv) want[static_cast<std::size_t>(c.op)][lv] += c.bytes[lv];
  for (int op = 0; op < coll::kNumCollOps; ++op)
    for (int lv = 0; lv < coll::kNumLinkLevels; ++lv)
      EXPECT_EQ(static_cast<std::uint64_t>(st.bytes[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)]),
                want[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)])
          << what << " op " << op << " level " << lv;
}

TEST(StepDescription, CallsSumToThePlanRows) {
  for (const char* name : kSchedulers)
    for (bool async : {true, false})
      for (int rank : {0, 3}) {
        Tiny s = tiny(rank, name);
        s.in.layout = &s.layout;
        s.in.options.async = async;
        const StepDescription d = schedulers::describe_step(name, s.in);
        expect_events_sum_to_plan(d, name);
        // Two micro-batches of a forward and a backward over every unit.
        EXPECT_EQ(d.calls.size(), static_cast<std::size_t>(2 * 2 * s.layout.num_units())) << name;
        // The simulated step moves the plan's bytes per op and level.
        const SimulatedStep st = simulate_step(d, times(s.layout.num_units(), 0.01, 0.02), links(10, 1, 0.1));
        expect_simulated_bytes_are_the_plans(st, d, name);
      }
}

// A ring all-gather of n fp32 elements per rank over p ranks on one node: p − 1 rounds of latency + 4n / bandwidth.
// One fp32 all-gather call of 1000 elements per rank over group `g`, with the bytes this rank sends per level.
schedulers::PlannedCollective one_all_gather(std::string g, std::uint64_t intra_bytes, std::uint64_t inter_bytes) {
  schedulers::PlannedCollective c;
  c.op = coll::CollOp::all_gather;
  c.group = std::move(g);
  c.dtype = DType::f32;
  c.calls = 1;
  c.elements = 1000;
  c.bytes = {intra_bytes, inter_bytes};
  return c;
}

TEST(StepSimulator, RingAllGatherIsItsClosedForm) {
  const schedulers::PlannedCollective c = one_all_gather("g", 3 * 1000 * 4, 0);
  SimulatorLinks l = links(20, 2, 0.5);
  l.ranks_per_node = 4;
  const coll::CollectiveModel m = model_planned_call(c, {0, 1, 2, 3}, 1, l);
  EXPECT_DOUBLE_EQ(m.duration_s, 3 * (20e-6 + 4000 / 2e9));
  // Over two nodes of 2 the two inter-node hops set each round: latency + 4n / the inter bandwidth.
  l.ranks_per_node = 2;
  EXPECT_DOUBLE_EQ(model_planned_call(c, {0, 1, 2, 3}, 1, l).duration_s, 3 * (20e-6 + 4000 / 0.5e9));
}

// A group with one member per node (a data-parallel replica group): on a node link shared by the node's ranks the
// copies the other ranks run at once queue behind each other, (rpn − 1) interface times more; with a NIC per rank
// (the cluster profiles) they do not.
TEST(StepSimulator, ANicPerRankDoesNotQueueTheNodesCopies) {
  const schedulers::PlannedCollective c = one_all_gather("replica", 0, 1 * 1000 * 4);
  SimulatorLinks l = links(20, 2, 0.5);
  l.ranks_per_node = 4;
  const double one = 20e-6 + 4000 / 0.5e9;
  EXPECT_DOUBLE_EQ(model_planned_call(c, {0, 4}, 0, l).duration_s, one + 3 * one);
  l.nic_per_rank = true;
  EXPECT_DOUBLE_EQ(model_planned_call(c, {0, 4}, 0, l).duration_s, one);
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

// asynchzp async queues every unit's refresh on the gradients stream at the step's start, and a unit's first gather
// waits for its own. With free forwards, z3 = z2 = 1 (nothing gathered over a network) and backwards long enough to
// hide every exchange but the last unit's, the exposed time is every refresh back to back plus that tail.
TEST(StepSimulator, RefreshesQueuedAtTheStepStartGateTheForwards) {
  Tiny s = tiny(0, "asynchzp");
  s.in.layout = &s.layout;
  s.in.options.async = true;
  s.in.options.z2 = s.in.options.z3 = 1;
  const StepDescription d = schedulers::describe_step("asynchzp", s.in);
  const SimulatorLinks l = links(10, 1, 0.1);
  const int last = static_cast<int>(d.calls.size()) - 1;
  double refreshes = 0, tail = 0;
  int declared = 0;
  for (const schedulers::StepEvent& e : d.events) {
    const double t = static_cast<double>(e.collective.calls) * model_planned_call(e.collective, e.members, 0, l).duration_s;
    if (e.collective.group == "refresh") {
      EXPECT_EQ(e.stream, schedulers::CommStream::gradients);
      EXPECT_EQ(e.place, schedulers::CommPlace::step_start);
      EXPECT_GE(e.call, 0);
      refreshes += t;
      ++declared;
    } else if (e.call == last || (e.call < 0 && e.stream == schedulers::CommStream::compute)) {
      tail += t;
    }
  }
  ASSERT_GT(declared, 2);
  ASSERT_GT(refreshes, 0);
  const SimulatedStep st = simulate_step(d, times(s.layout.num_units(), 0.0, 1.0), l);
  EXPECT_NEAR(st.exposed_comm_s, refreshes + tail, 1e-9);
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


// ---- tensor, context and pipeline parallelism (nd and asynchzp): the model's own calls inside its units

// tiny (T = 64) with its model spec, for layouts the plan needs the model for; `sets` the degrees.
struct TinyModel {
  std::unique_ptr<workloads::ModelSpec> spec;
  std::unique_ptr<workloads::ParamLayout> held;  // where in.layout points, whatever moves the struct
  const workloads::ParamLayout& layout;
  PlanInputs in;
};

TinyModel tiny_model(int world, int rank, const schedulers::SchedulerOptions& options, const char* name = "tiny") {
  const auto& preset = workloads::model_preset(name);
  auto held = std::make_unique<workloads::ParamLayout>(workloads::llama_layout(preset.model));
  const workloads::ParamLayout& layout = *held;
  TinyModel t{workloads::llama_spec(preset.model), std::move(held), layout, {}};
  t.in.layout = &t.layout;
  t.in.model = t.spec.get();
  t.in.train = preset.train;
  t.in.train.global_batch = 8;
  t.in.train.micro_batch_size = 1;
  t.in.world_size = world;
  t.in.ranks_per_node = 2;
  t.in.rank = rank;
  t.in.small_message_bytes = 0;
  t.in.options = options;
  return t;
}

struct Layout {
  const char* name;
  const char* scheduler;
  int tp, cp, pp;
};
const Layout kModelLayouts[] = {{"nd tp2 x dp2", "nd", 2, 1, 1},  {"nd cp2 x dp2", "nd", 1, 2, 1},
                                {"nd pp2 x dp2", "nd", 1, 1, 2},  {"nd tp2 x cp2", "nd", 2, 2, 1},
                                {"asynchzp cp2", "asynchzp", 1, 2, 1}, {"asynchzp pp2", "asynchzp", 1, 1, 2}};

schedulers::SchedulerOptions options_of(const Layout& l) {
  schedulers::SchedulerOptions o;
  o.tp = l.tp;
  o.cp = l.cp;
  o.pp = l.pp;
  o.z1 = 4 / l.pp;
  o.z2 = o.z3 = 2;
  return o;
}

// Every layout's described calls (ring messages split into the ones before and after a block included) sum to the
// plan's rows, and the simulated bytes per op and level are the plan's.
TEST(StepDescription, ModelLayoutsSumToThePlanRows) {
  for (const Layout& l : kModelLayouts)
    for (int rank : {0, 3}) {
      TinyModel t = tiny_model(4, rank, options_of(l));
      const StepDescription d = schedulers::describe_step(l.scheduler, t.in);
      EXPECT_EQ(d.model_tp, l.tp) << l.name;
      EXPECT_EQ(d.model_cp, l.cp) << l.name;
      for (const schedulers::StepEvent& e : d.events) {
        if (e.collective.group == "tp" && e.call >= 0) {
          EXPECT_EQ(e.place, schedulers::CommPlace::inside_unit) << l.name;
        }
        if (e.collective.group == "cp" && e.call >= 0) {
          EXPECT_EQ(e.stream, schedulers::CommStream::ring) << l.name;
        }
        if (e.collective.group == "pp") {
          EXPECT_EQ(e.stream, schedulers::CommStream::pipeline) << l.name;
        }
      }
      expect_events_sum_to_plan(d, l.name);
    }
}

TEST(StepSimulator, ModelLayoutsMoveThePlansBytes) {
  for (const Layout& l : kModelLayouts) {
    std::vector<TinyModel> ts;
    std::vector<StepDescription> ds;
    for (int r = 0; r < 4; ++r) ts.push_back(tiny_model(4, r, options_of(l)));
    for (TinyModel& t : ts) ds.push_back(schedulers::describe_step(l.scheduler, t.in));
    std::vector<const StepDescription*> ptrs;
    for (const StepDescription& d : ds) ptrs.push_back(&d);
    const std::vector<SimulatedStep> st = simulate_steps(ptrs, times(ts[0].layout.num_units(), 0.01, 0.02), links(10, 1, 0.1));
    for (std::size_t r = 0; r < ds.size(); ++r) {
      expect_simulated_bytes_are_the_plans(st[r], ds[r], std::string(l.name) + " rank " + std::to_string(r));
      // The step closes into compute, exposed communication and pipeline wait.
      EXPECT_NEAR(st[r].step_s, st[r].compute_s + st[r].exposed_comm_s + st[r].pipeline_wait_s, 1e-9) << l.name;
      // Without stages a rank computes its micro-batches' every unit at its shard: 1/(tp · cp) of the whole.
      const int dp = 4 / (l.tp * l.cp * l.pp);
      if (l.pp == 1) {
        EXPECT_NEAR(st[r].compute_s, 8 / dp * ts[0].layout.num_units() * 0.03 / (l.tp * l.cp), 1e-9) << l.name;
      }
    }
  }
}

// asynchzp with scheduler.tied_split: the description has the rows' exchange on the gradients stream right after the
// embedding's backward of the last micro-batch (async) and the table's last reduce-scatter after the head's; its
// calls sum to the plan's rows (which the run's counters match, test_asynchzp_tied_split) and the simulated step of
// all four ranks moves them. rows_allgather: two all-gathers of T slots; rows_alltoall: the counts' all-to-all and
// the ids' and values' all-to-all-v, whose bytes are the uniform-owner expectation T·(W−1)/z1 rows of 4 + d·4 bytes
// plus (W−1) int64 counts (here z1 = W: T·(W−1)/W rows). The split leaves every other row as it was.
TEST(StepSimulator, TiedSplitRowsAreDescribedAndMoved) {
  using TiedSplit = schedulers::SchedulerOptions::TiedSplit;
  // cp = 2 too: each rank's rows are its own tokens', T = micro_batch_size · seq_len / cp slots.
  for (int cp : {1, 2})
    for (TiedSplit mode : {TiedSplit::rows_allgather, TiedSplit::rows_alltoall})
      for (bool async : {true, false}) {
        schedulers::SchedulerOptions o;
        o.z1 = 4;
        o.z2 = o.z3 = 2;
        o.cp = cp;
        o.async = async;
        std::vector<TinyModel> ts, off;
        std::vector<StepDescription> ds;
        for (int r = 0; r < 4; ++r) {
          o.tied_split = mode;
          ts.push_back(tiny_model(4, r, o));
          o.tied_split = TiedSplit::off;
          off.push_back(tiny_model(4, r, o));
        }
        for (TinyModel& t : ts) ds.push_back(schedulers::describe_step("asynchzp", t.in));
        const bool to_owners = mode == TiedSplit::rows_alltoall;
        const std::string name = std::string(to_owners ? "rows_alltoall" : "rows_allgather") +
                                 (async ? " async" : " inline") + " cp=" + std::to_string(cp);
        const int units = ts[0].layout.num_units(), last_call = static_cast<int>(ds[0].calls.size()) - 1;
        const workloads::LlamaConfig& shape = workloads::model_preset("tiny").model;
        const auto t = static_cast<std::uint64_t>(ts[0].in.train.micro_batch_size * shape.seq_len / cp);
        for (std::size_t r = 0; r < ds.size(); ++r) {
          expect_events_sum_to_plan(ds[r], name);
          std::vector<coll::CollOp> ops;
          for (const schedulers::StepEvent& e : ds[r].events) {
            if (e.collective.group != "tied_rows") continue;
            ops.push_back(e.collective.op);
            if (async) {  // behind the embedding's last backward, the step's last unit call
              EXPECT_EQ(e.call, last_call) << name;
              EXPECT_EQ(e.stream, schedulers::CommStream::gradients) << name;
            } else {
              EXPECT_EQ(e.call, -1) << name << ": inline, at the step end";
            }
          }
          using coll::CollOp;
          const std::vector<CollOp> want_ops = to_owners
                                                   ? std::vector<CollOp>{CollOp::all_to_all, CollOp::all_to_allv,
                                                                         CollOp::all_to_allv}
                                                   : std::vector<CollOp>{CollOp::all_gather, CollOp::all_gather};
          EXPECT_EQ(ops, want_ops) << name << ": the counts, the ids and the values";
          // The rows' bytes: W = 4 ranks, z1 = 4, d = tiny's hidden, fp32 values.
          const std::uint64_t w = 4, hidden = static_cast<std::uint64_t>(shape.hidden), z1 = 4;
          std::uint64_t rows_bytes = 0;
          for (const auto& c : ds[r].plan.collectives)
            if (c.group == "tied_rows") rows_bytes += c.bytes[0] + c.bytes[1];
          const std::uint64_t want_bytes = to_owners ? t * (w - 1) / z1 * (4 + hidden * 4) + (w - 1) * 8
                                                     : (w - 1) * t * (4 + hidden * 4);
          EXPECT_EQ(rows_bytes, want_bytes) << name;
          // Every other row is the option off's.
          const StepDescription d_off = schedulers::describe_step("asynchzp", off[r].in);
          std::map<std::pair<std::string, int>, std::uint64_t> a, b;
          for (const auto& c : ds[r].plan.collectives)
            if (c.group != "tied_rows") a[{c.group, static_cast<int>(c.op)}] += c.bytes[0] + c.bytes[1];
          for (const auto& c : d_off.plan.collectives) b[{c.group, static_cast<int>(c.op)}] += c.bytes[0] + c.bytes[1];
          EXPECT_EQ(a, b) << name;
        }
        std::vector<const StepDescription*> ptrs;
        for (const StepDescription& x : ds) ptrs.push_back(&x);
        const std::vector<SimulatedStep> st = simulate_steps(ptrs, times(units, 0.01, 0.02), links(10, 1, 0.1));
        for (std::size_t r = 0; r < ds.size(); ++r)
          expect_simulated_bytes_are_the_plans(st[r], ds[r], name + " rank " + std::to_string(r));
      }
}

// Tensor parallelism blocks the compute thread between a unit's matmuls: with dp = 1 (nothing else to overlap) the
// step is each unit's time at its shard (1/tp of the whole) plus every tensor-parallel call's duration.
TEST(StepSimulator, TensorParallelIsBlockingInsideTheUnit) {
  schedulers::SchedulerOptions o;
  o.tp = 2;
  TinyModel t = tiny_model(2, 0, o);
  const StepDescription d = schedulers::describe_step("nd", t.in);
  const SimulatorLinks l = links(10, 1, 0.1);
  const int units = t.layout.num_units();
  const SimulatedStep st = simulate_step(d, times(units, 0.01, 0.03), l);
  double comm = 0;
  int tp_calls = 0;
  for (const schedulers::StepEvent& e : d.events) {
    comm += static_cast<double>(e.collective.calls) * model_planned_call(e.collective, e.members, 0, l).duration_s;
    if (e.collective.group == "tp") tp_calls += static_cast<int>(e.collective.calls);
  }
  ASSERT_GT(tp_calls, 0);
  const double compute = 8 * units * (0.01 + 0.03) / 2;  // 8 micro-batches on the one data-parallel rank, halved
  EXPECT_NEAR(st.compute_s, compute, 1e-12);
  EXPECT_NEAR(st.step_s, compute + comm, 1e-9);
  EXPECT_NEAR(st.exposed_comm_s, comm, 1e-9);
}

// Expert parallelism (nd ep2 on tiny-moe at W = 2: the expert-data group is one rank, so no buckets run and the dense
// sum over ep is the step end's, blocking): the all-to-alls block the compute thread around the experts' share of each
// MoE unit, so the step is the whole compute plus every call's duration, whatever that share; each all-to-all is
// described inside its unit, on the ep group, and the calls sum to the plan's rows.
TEST(StepSimulator, ExpertAllToAllsBlockAroundTheExperts) {
  schedulers::SchedulerOptions o;
  o.ep = 2;
  TinyModel t = tiny_model(2, 0, o, "tiny-moe");
  const StepDescription d = schedulers::describe_step("nd", t.in);
  expect_events_sum_to_plan(d, "nd ep2");
  const SimulatorLinks l = links(10, 1, 0.1);
  const int units = t.layout.num_units();
  double comm = 0;
  int ep_calls = 0;
  for (const schedulers::StepEvent& e : d.events) {
    comm += static_cast<double>(e.collective.calls) * model_planned_call(e.collective, e.members, 0, l).duration_s;
    if (e.collective.group != "ep") continue;
    ep_calls += static_cast<int>(e.collective.calls);
    EXPECT_EQ(e.place, schedulers::CommPlace::inside_unit);
    EXPECT_GE(e.call, 0);
  }
  // Per MoE block and micro-batch: forward the counts, dispatch and combine; backward two exchanges.
  const auto& m = workloads::model_preset("tiny-moe").model;
  EXPECT_EQ(ep_calls, 4 * (m.layers - m.moe.dense_layers) * 5);  // 4 micro-batches per rank
  const double compute = 4 * units * (0.01 + 0.03);
  for (const double share : {0.0, 0.5}) {
    UnitTimes ut = times(units, 0.01, 0.03);
    ut.expert_share.assign(static_cast<std::size_t>(units), share);
    const SimulatedStep st = simulate_step(d, ut, l);
    EXPECT_NEAR(st.compute_s, compute, 1e-12) << share;
    EXPECT_NEAR(st.step_s, compute + comm, 1e-9) << share;
    EXPECT_NEAR(st.exposed_comm_s, comm, 1e-9) << share;
  }
}

// nd cp2 at W = 2 (dp = 1, the buckets blocking: only the ring's messages can overlap, with their blocks) and its calls'
// modelled durations on rank 0's links: K and V posted before a block (all of them, and the longest), every other call.
struct RingAlone {
  TinyModel t;
  StepDescription d;
  double kv_s = 0, kv_longest_s = 0, other_s = 0;
};

RingAlone ring_alone(const SimulatorLinks& l) {
  schedulers::SchedulerOptions o;
  o.cp = 2;
  o.overlap = false;
  RingAlone r{tiny_model(2, 0, o), {}};
  r.d = schedulers::describe_step("nd", r.t.in);
  for (const schedulers::StepEvent& e : r.d.events) {
    if (e.collective.op == coll::CollOp::recv) continue;
    const double one = e.collective.op == coll::CollOp::send
                           ? model_message(e.collective, e.members, 0, e.peer, l).duration_s
                           : model_planned_call(e.collective, e.members, 0, l).duration_s;
    const double all = static_cast<double>(e.collective.calls) * one;
    if (e.stream == schedulers::CommStream::ring && e.place == schedulers::CommPlace::before_unit) {
      r.kv_s += all;
      r.kv_longest_s = std::max(r.kv_longest_s, one);
    } else {
      r.other_s += all;
    }
  }
  return r;
}

// Ring attention: with blocks far longer than a message, K and V travel behind the attention blocks and are hidden;
// backward's dK and dV go out after each block and are waited for: exposed = every blocking collective's duration +
// the after-block messages', not the K, V ones.
TEST(StepSimulator, RingAttentionHidesKAndVBehindItsBlocks) {
  const SimulatorLinks l = links(10, 1, 0.1);
  const RingAlone r = ring_alone(l);
  const int units = r.t.layout.num_units();
  UnitTimes ut = times(units, 0.02, 0.04);
  ut.attention_share.assign(static_cast<std::size_t>(units), 1.0);
  const SimulatedStep st = simulate_step(r.d, ut, l);
  ASSERT_GT(r.kv_s, 0);
  ASSERT_LT(2 * r.kv_longest_s, 0.02 / 2 / 2);  // two messages per step, shorter than a block (cp = 2 blocks, halved)
  EXPECT_NEAR(st.compute_s, 8 * units * 0.06 / 2, 1e-12);
  EXPECT_NEAR(st.exposed_comm_s, r.other_s, 1e-9);
  EXPECT_NEAR(st.step_s, st.compute_s + r.other_s, 1e-9);
}

// The benchmark hook's sleep (UnitTimes::after_s, scheduler.debug_unit_sleep_ms) is what StepDriver sleeps after a
// unit on every rank, whatever its shard: a cp2 rank sleeps it whole, not halved, and after the unit's ring, so it
// hides no message. Units that are all sleep compute for exactly their whole time, and every call is exposed, K and V
// included: the step is the calibration's time plus every call's duration.
TEST(StepSimulator, UnitSleepIsWholeOnEveryShardAndHidesNoMessage) {
  const SimulatorLinks l = links(10, 1, 0.1);
  const RingAlone r = ring_alone(l);
  const int units = r.t.layout.num_units();
  UnitTimes ut = times(units, 0.02, 0.02);
  ut.attention_share.assign(static_cast<std::size_t>(units), 1.0);
  ut.after_s.assign(static_cast<std::size_t>(units), 0.02);
  const SimulatedStep st = simulate_step(r.d, ut, l);
  ASSERT_GT(r.kv_s, 0);
  EXPECT_NEAR(st.compute_s, 8 * units * 0.04, 1e-12);  // 8 micro-batches, forward and backward, not halved
  EXPECT_NEAR(st.exposed_comm_s, r.kv_s + r.other_s, 1e-9);
  EXPECT_NEAR(st.step_s, 8 * units * 0.04 + r.kv_s + r.other_s, 1e-9);
  // Units that compute besides sleeping: the compute halves at the shard, the sleep does not.
  ut.forward_s.assign(static_cast<std::size_t>(units), 0.06);
  ut.backward_s.assign(static_cast<std::size_t>(units), 0.1);
  EXPECT_NEAR(simulate_step(r.d, ut, l).compute_s, 8 * units * ((0.06 - 0.02) / 2 + (0.1 - 0.02) / 2 + 2 * 0.02),
              1e-12);
}

// The textbook bubble: stages of equal work and messages that cost nothing leave every stage idle for
// (pp − 1)/(m + pp − 1) of the step under 1F1B (and (pp − 1)/(v·m + pp − 1) interleaved), all of it pipeline wait,
// and the step is the schedule's own timeline (pipeline_timeline over the same action lists).
TEST(StepSimulator, PipelineBubbleIsTheTextbookOne) {
  struct Case {
    int pp, v, micro_batches;
    schedulers::PipelineScheduleKind kind;
  };
  for (const Case c : {Case{2, 1, 4, schedulers::PipelineScheduleKind::one_f_one_b},
                       Case{4, 1, 8, schedulers::PipelineScheduleKind::one_f_one_b},
                       Case{2, 1, 8, schedulers::PipelineScheduleKind::gpipe},
                       Case{2, 2, 4, schedulers::PipelineScheduleKind::interleaved}}) {
    schedulers::SchedulerOptions o;
    o.pp = c.pp;
    o.virtual_stages = c.v;
    o.schedule = c.kind;
    std::vector<TinyModel> ts;
    std::vector<StepDescription> ds;
    for (int r = 0; r < c.pp; ++r) {
      ts.push_back(tiny_model(c.pp, r, o));
      ts.back().in.train.global_batch = c.micro_batches;
      ts.back().in.ranks_per_node = 0;
    }
    for (TinyModel& t : ts) ds.push_back(schedulers::describe_step("nd", t.in));
    std::vector<const StepDescription*> ptrs;
    for (const StepDescription& d : ds) ptrs.push_back(&d);
    // Blocks take f and b; the ends (embedding, head) nothing, so every chunk holds equal work.
    const int units = ts[0].layout.num_units();
    const double f = 0.01, b = 0.02;
    UnitTimes ut = times(units, f, b);
    ut.forward_s.front() = ut.forward_s.back() = ut.backward_s.front() = ut.backward_s.back() = 0;
    SimulatorLinks l = links(0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity());
    l.ranks_per_node = 0;
    const std::vector<SimulatedStep> st = simulate_steps(ptrs, ut, l);
    const double bubble = double(c.pp - 1) / (c.v * c.micro_batches + c.pp - 1);
    const int blocks_per_chunk = (units - 2) / (c.pp * c.v);
    const double chunk = blocks_per_chunk * (f + b);
    const double ideal = c.micro_batches * c.v * chunk;  // a stage's work
    schedulers::PipelineLayout pl = schedulers::PipelineLayout::balanced(units, c.pp, c.v);
    const schedulers::PipelineTimeline tl =
        schedulers::pipeline_timeline(c.kind, pl, c.micro_batches, std::vector<double>(c.pp * c.v, blocks_per_chunk * f),
                                      std::vector<double>(c.pp * c.v, blocks_per_chunk * b));
    for (int r = 0; r < c.pp; ++r) {
      const SimulatedStep& s = st[static_cast<std::size_t>(r)];
      EXPECT_NEAR(s.compute_s, ideal, 1e-12);
      EXPECT_NEAR(s.step_s, tl.makespan, 1e-12) << "pp " << c.pp << " rank " << r;
      EXPECT_NEAR(s.pipeline_wait_s / s.step_s, bubble, 1e-12) << "pp " << c.pp << " v " << c.v << " rank " << r;
      EXPECT_NEAR(s.exposed_comm_s, 0, 1e-12);
    }
  }
}
}  // namespace
}  // namespace hzp::harness
