// Schedules (hzp/schedulers/step/schedule.hpp) and the gather order an engine that gathers on first use
// derives from them (asynchzp's gather_order): the sequential schedule's actions, the checks that refuse a
// malformed schedule, and the gathers of untied and tied models written out by hand. Also the plan's walk
// over an engine's declarations (step/engine_plan.hpp), with a toy engine that records what it is asked.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "asynchzp/async_comm.hpp"
#include "hzp/core/error.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/llama.hpp"

namespace hzp::schedulers {
namespace {

using K = Action::Kind;

TEST(Schedule, SequentialIsForwardThenBackwardPerMicroBatch) {
  const std::vector<Action> s = sequential_schedule(2, 4);
  const std::vector<Action> want = {{K::forward, 0, 0, 4}, {K::backward, 0, 0, 4}, {K::forward, 1, 0, 4},
                                    {K::backward, 1, 0, 4}};
  EXPECT_EQ(s, want);
  EXPECT_NO_THROW(check_schedule(s, 2, 4));
  EXPECT_EQ(to_string(s[1]), "B0[0,4)");
}

TEST(Schedule, StageRangesAndInterleavingAreAccepted) {
  // Two ranges per pass (as a pipeline's chunks would be) and micro-batch 1's forward before 0's backward.
  const std::vector<Action> s = {{K::forward, 0, 0, 2}, {K::forward, 0, 2, 4}, {K::forward, 1, 0, 4},
                                 {K::backward, 0, 2, 4}, {K::backward, 0, 0, 2}, {K::backward, 1, 0, 4}};
  EXPECT_NO_THROW(check_schedule(s, 2, 4));
}

TEST(Schedule, MalformedSchedulesAreRefused) {
  auto refused = [](const std::vector<Action>& s) {
    try {
      check_schedule(s, 1, 4);
    } catch (const PreconditionError&) {
      return true;
    }
    return false;
  };
  EXPECT_TRUE(refused({{K::backward, 0, 0, 4}, {K::forward, 0, 0, 4}}));                       // backward first
  EXPECT_TRUE(refused({{K::forward, 0, 1, 4}, {K::backward, 0, 0, 4}}));                       // skips unit 0
  EXPECT_TRUE(refused({{K::forward, 0, 0, 4}}));                                               // no backward
  EXPECT_TRUE(refused({{K::forward, 0, 0, 4}, {K::backward, 0, 0, 2}, {K::backward, 0, 2, 4}}));  // upwards
  EXPECT_TRUE(refused({{K::forward, 0, 0, 5}, {K::backward, 0, 0, 5}}));                       // beyond the units
  EXPECT_TRUE(refused({{K::forward, 1, 0, 4}, {K::backward, 1, 0, 4}}));                       // no micro-batch 1
}

workloads::ParamLayout layout(bool tied) {
  workloads::LlamaConfig c;
  c.layers = 2;  // units: 0 embedding, 1-2 blocks, 3 head
  c.tied_embeddings = tied;
  return workloads::llama_layout(c);
}

TEST(GatherOrder, UntiedModelGathersEachUnitOncePerPass) {
  const workloads::ParamLayout l = layout(false);
  ASSERT_EQ(l.num_units(), 4);
  const std::vector<int> one = {0, 1, 2, 3, 3, 2, 1, 0};
  std::vector<int> two = one;
  two.insert(two.end(), one.begin(), one.end());
  EXPECT_EQ(gather_order(l, sequential_schedule(2, 4)), two);
}

TEST(GatherOrder, TiedEmbeddingIsHeldFromUnitZeroToTheHeadAndGatheredAgainForItsBackward) {
  // The head reads the embedding table: held through the forward (last used there by the head), dropped,
  // gathered again for the head's backward and held until unit 0's backward makes its gradient final.
  const workloads::ParamLayout l = layout(true);
  ASSERT_EQ(l.num_units(), 4);
  std::vector<int> head_backward;
  for (int b : l.param_blocks(3)) head_backward.push_back(b);
  std::vector<int> want = {0, 1, 2, 3};
  want.insert(want.end(), head_backward.begin(), head_backward.end());
  want.insert(want.end(), {2, 1});
  EXPECT_EQ(head_backward.size(), 2u);
  EXPECT_EQ(gather_order(l, sequential_schedule(1, 4)), want);
  // Interleaved micro-batches share what is held: micro-batch 1's forward of unit 0 reuses nothing here,
  // because micro-batch 0's forward dropped every block after its last forward use.
  const std::vector<Action> interleaved = {{K::forward, 0, 0, 4}, {K::forward, 1, 0, 4}, {K::backward, 0, 0, 4},
                                           {K::backward, 1, 0, 4}};
  const std::vector<int> got = gather_order(l, interleaved);
  EXPECT_EQ(got.size(), 2 * want.size());
}

// A toy engine: one all-reduce of one element per unit call, named after the call, and one at the step end.
class RecordingEngine final : public EnginePlan {
 public:
  std::vector<std::string> calls;
  void unit(const Action& a, int u, int micro_batches, CollectiveLedger& out) override {
    EXPECT_EQ(micro_batches, static_cast<int>(micro_batches_per_rank));
    calls.push_back(std::string(a.kind == K::forward ? "F" : "B") + std::to_string(a.micro_batch) + ":" +
                    std::to_string(u));
    out.all_reduce(group_, 1, DType::f32, 1, "per call");
  }
  void step_end(CollectiveLedger& out) const override { out.all_reduce(group_, 3, DType::f64, 1, "step end"); }
  PlanGroup group_{"g", {0, 1}};
};

TEST(EnginePlan, ThePlanWalksTheDriversScheduleThenTheStepEndThenTheDriversOwn) {
  workloads::LlamaConfig c;
  c.layers = 1;  // units: embedding, block.0, head
  const workloads::ParamLayout layout = workloads::llama_layout(c);
  PlanInputs in;
  in.layout = &layout;
  in.world_size = 2;
  in.train.global_batch = 4;
  in.train.micro_batch_size = 1;
  RecordingEngine e;
  e.micro_batches_per_rank = 2;
  e.state_bytes = {1, 2, 3, 4, 5};
  const SchedulerPlan p = plan_from_engine("toy", in, e);
  const std::vector<std::string> want = {"F0:0", "F0:1", "F0:2", "B0:2", "B0:1", "B0:0",
                                         "F1:0", "F1:1", "F1:2", "B1:2", "B1:1", "B1:0"};
  EXPECT_EQ(e.calls, want);
  ASSERT_EQ(p.collectives.size(), 2u);  // no driver group: no loss reduction
  EXPECT_EQ(p.collectives[0].when, "per call");
  EXPECT_EQ(p.collectives[0].calls, 12);
  EXPECT_EQ(p.collectives[0].group_size, 2);
  EXPECT_EQ(p.collectives[1].when, "step end");
  EXPECT_EQ(p.collectives[1].elements, 3);
  EXPECT_EQ(p.state_bytes[4], 5u);
  EXPECT_EQ(p.micro_batches_per_rank, 2);

  // With a driver group, the driver's own collectives close the list: the loss, or in deterministic mode the
  // tally (every tensor's maximum and two flags) and the micro-batch losses.
  RecordingEngine d;
  d.micro_batches_per_rank = 2;
  d.driver_group = {"scalars", {0, 1}};
  SchedulerPlan q = plan_from_engine("toy", in, d);
  ASSERT_EQ(q.collectives.size(), 3u);
  EXPECT_EQ(q.collectives[2].group, "scalars");
  EXPECT_EQ(q.collectives[2].elements, 1);
  in.train.deterministic = true;
  RecordingEngine f;
  f.micro_batches_per_rank = 2;
  f.driver_group = {"scalars", {0, 1}};
  q = plan_from_engine("toy", in, f);
  ASSERT_EQ(q.collectives.size(), 4u);
  std::int64_t tensors = 0;
  for (const workloads::Unit& u : layout.units()) tensors += static_cast<std::int64_t>(u.tensors.size());
  EXPECT_EQ(q.collectives[2].elements, tensors + 2);
  EXPECT_EQ(q.collectives[3].op, coll::CollOp::all_gather);
  EXPECT_EQ(q.collectives[3].elements, 2);
}

}  // namespace
}  // namespace hzp::schedulers
