// Pipeline schedules (hzp/schedulers/step/pipeline_schedule.hpp): the order of actions per stage against the
// textbook schedules written out by hand (GPipe; 1F1B as PipeDream-Flush / Megatron's non-interleaved schedule;
// Megatron's interleaved 1F1B of Narayanan et al. 2021, §2.2), the layouts' unit ranges, and the refusals.
// Notation: "F3" is micro-batch 3's forward on the stage's only chunk, "F3.1" on its chunk 1; "B" backward.
#include <gtest/gtest.h>

#include <algorithm>

#include <sstream>
#include <string>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/step/pipeline_schedule.hpp"

namespace hzp::schedulers {
namespace {

using Kind = PipelineScheduleKind;

// The schedule of `stage` in the notation above.
std::string written(const PipelineLayout& l, Kind kind, int stage, int m) {
  const std::vector<Action> actions = pipeline_schedule(kind, l, stage, m);
  EXPECT_NO_THROW(check_stage_schedule(actions, l, stage, m));
  std::ostringstream o;
  for (const Action& a : actions) {
    int chunk = -1;
    for (int c = 0; c < l.v; ++c)
      if (l.first_unit(l.chunk_of(stage, c)) == a.first_unit) chunk = c;
    o << (o.tellp() > 0 ? " " : "") << (a.kind == Action::Kind::forward ? "F" : "B") << a.micro_batch;
    if (l.v > 1) o << "." << chunk;
  }
  return o.str();
}

TEST(PipelineLayout, BalancedPutsTheEndsOnTheFirstAndLastChunk) {
  // tiny: embedding, 4 blocks, head = 6 units.
  const PipelineLayout two = PipelineLayout::balanced(6, 2, 1);
  EXPECT_EQ(two.bounds, (std::vector<int>{0, 3, 6}));  // [emb, b0, b1] [b2, b3, head]
  const PipelineLayout four = PipelineLayout::balanced(6, 4, 1);
  EXPECT_EQ(four.bounds, (std::vector<int>{0, 2, 3, 4, 6}));
  // 2 stages of 2 chunks: chunk k on stage k mod 2; stage 0 holds chunks 0 and 2.
  const PipelineLayout inter = PipelineLayout::balanced(6, 2, 2);
  EXPECT_EQ(inter.bounds, (std::vector<int>{0, 2, 3, 4, 6}));
  EXPECT_EQ(inter.chunk_of(0, 1), 2);
  EXPECT_EQ(inter.describe(), "stage 0: units [0,2) [3,4); stage 1: units [2,3) [4,6)");
  // 7 blocks over 3 stages: the first stage takes the extra one.
  EXPECT_EQ(PipelineLayout::balanced(9, 3, 1).bounds, (std::vector<int>{0, 4, 6, 9}));
  EXPECT_EQ(PipelineLayout::from_blocks(10, {1, 4, 3}).bounds, (std::vector<int>{0, 2, 6, 10}));
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  const PipelineLayout l = PipelineLayout::balanced(6, 2, 1);
  for (int s : {0, 1}) EXPECT_EQ(written(l, Kind::gpipe, s, 4), "F0 F1 F2 F3 B0 B1 B2 B3") << "stage " << s;
}

TEST(PipelineSchedule, OneFOneBHasPpMinusStageMinusOneWarmUpForwards) {
  const PipelineLayout p2 = PipelineLayout::balanced(6, 2, 1);
  EXPECT_EQ(written(p2, Kind::one_f_one_b, 0, 4), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(written(p2, Kind::one_f_one_b, 1, 4), "F0 B0 F1 B1 F2 B2 F3 B3");
  const PipelineLayout p4 = PipelineLayout::balanced(6, 4, 1);
  EXPECT_EQ(written(p4, Kind::one_f_one_b, 0, 8), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(written(p4, Kind::one_f_one_b, 1, 8), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(written(p4, Kind::one_f_one_b, 2, 8), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(written(p4, Kind::one_f_one_b, 3, 8), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: the warm-up is cut to m, and nothing runs in the steady state.
  EXPECT_EQ(written(p4, Kind::one_f_one_b, 0, 2), "F0 F1 B0 B1");
}

TEST(PipelineSchedule, ActivationsInFlightAreMForGPipeAndPpMinusStageFor1F1B) {
  const PipelineLayout p4 = PipelineLayout::balanced(6, 4, 1);
  for (int m : {2, 4, 8})
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(schedulers::max_in_flight(schedulers::pipeline_schedule(Kind::gpipe, p4, s, m)), m);
      EXPECT_EQ(schedulers::max_in_flight(schedulers::pipeline_schedule(Kind::one_f_one_b, p4, s, m)),
                std::min(4 - s, m))
          << "stage " << s << " m " << m;
    }
  // Interleaved (pp = 2, v = 2, m = 4) on stage 0: a warm-up of (2 − 0 − 1)·2 + (2 − 1)·2 = 4 chunk forwards, then
  // one more before the first backward: 5 chunk contexts, 2.5 micro-batches' worth, counted as 3.
  const PipelineLayout i2 = PipelineLayout::balanced(6, 2, 2);
  EXPECT_EQ(schedulers::max_in_flight(schedulers::pipeline_schedule(Kind::interleaved, i2, 0, 4)), 5);
  EXPECT_EQ(schedulers::max_in_flight(schedulers::pipeline_schedule(Kind::interleaved, i2, 0, 4), 2), 3);
}

TEST(PipelineSchedule, InterleavedRunsGroupsOfPpMicroBatchesChunkByChunk) {
  // pp = 2, v = 2, m = 4: forwards in the order (mb, chunk) 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1, backwards 0.1 1.1
  // 0.0 1.0 2.1 3.1 2.0 3.0; stage 0 warms up with (2 − 0 − 1)·2 + (2 − 1)·2 = 4 forwards, stage 1 with 2.
  const PipelineLayout l = PipelineLayout::balanced(6, 2, 2);
  EXPECT_EQ(written(l, Kind::interleaved, 0, 4),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(written(l, Kind::interleaved, 1, 4),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m = pp: every forward first (Megatron's rule), then the backwards in order.
  EXPECT_EQ(written(l, Kind::interleaved, 1, 2), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

TEST(PipelineSchedule, RefusesLayoutsThatCannotRun) {
  auto fails = [](auto&& f, std::vector<std::string> fragments) {
    try {
      f();
    } catch (const ConfigError& e) {
      for (const std::string& s : fragments)
        if (std::string(e.what()).find(s) == std::string::npos) return ::testing::AssertionFailure() << e.what();
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no ConfigError";
  };
  // More chunks than blocks (tiny has 4).
  EXPECT_TRUE(fails([] { PipelineLayout::balanced(6, 8, 1); }, {"scheduler.pp = 8", "4"}));
  EXPECT_TRUE(fails([] { PipelineLayout::balanced(6, 2, 4); }, {"scheduler.virtual_stages = 4"}));
  // Interleaved micro-batches must come in groups of pp.
  const PipelineLayout inter = PipelineLayout::balanced(6, 2, 2);
  EXPECT_TRUE(fails([&] { pipeline_schedule(Kind::interleaved, inter, 0, 3); }, {"scheduler.pp = 2", "3 micro-batches"}));
  // v and the schedule must agree.
  EXPECT_TRUE(fails([&] { pipeline_schedule(Kind::one_f_one_b, inter, 0, 4); }, {"1f1b", "virtual_stages = 2"}));
  EXPECT_TRUE(fails([] { PipelineLayout::from_blocks(6, {3, 2}); }, {"scheduler.pp_layers = [3, 2]", "4 blocks"}));
  // The check itself refuses a backward before its forward.
  const PipelineLayout two = PipelineLayout::balanced(6, 2, 1);
  const std::vector<Action> bad = {{Action::Kind::backward, 0, 0, 3}, {Action::Kind::forward, 0, 0, 3}};
  EXPECT_THROW(check_stage_schedule(bad, two, 0, 1), PreconditionError);
}

}  // namespace
}  // namespace hzp::schedulers
