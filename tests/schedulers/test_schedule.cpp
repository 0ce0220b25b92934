// Schedules (hzp/schedulers/step/schedule.hpp) and the gather order an engine that gathers on first use
// derives from them (asynchzp's gather_order): the sequential schedule's actions, the checks that refuse a
// malformed schedule, and the gathers of untied and tied models written out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "asynchzp/async_comm.hpp"
#include "hzp/core/error.hpp"
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

}  // namespace
}  // namespace hzp::schedulers
