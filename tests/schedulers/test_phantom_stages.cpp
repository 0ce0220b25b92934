// PhantomPeerStages (hzp/schedulers/step/phantom_stages.hpp): a phantom stage's absent peers run the textbook
// timeline on this stage's own measured times. Checked by hand on a 2-stage 1F1B with forward 1 s and backward 3 s:
// when stage 1's inputs leave stage 0 and when the last stage ends, from the step's start; the first step's
// estimates follow its measurements, a later step's are the previous step's means.
#include <gtest/gtest.h>

#include <vector>

#include "hzp/schedulers/step/phantom_stages.hpp"

namespace hzp::test {
namespace {

using schedulers::Action;
using schedulers::PhantomPeerStages;
using schedulers::PipelineLayout;
using schedulers::PipelineScheduleKind;

// Runs stage `stage`'s 1F1B list of m micro-batches, each forward taking f and each backward b.
void measure_step(PhantomPeerStages& peers, const PipelineLayout& layout, int stage, int m, double f, double b) {
  for (const Action& a : schedulers::pipeline_schedule(PipelineScheduleKind::one_f_one_b, layout, stage, m))
    peers.measured(a, a.kind == Action::Kind::forward ? f : b);
}

Action find(const PipelineLayout& layout, int stage, int m, Action::Kind kind, int mb) {
  for (const Action& a : schedulers::pipeline_schedule(PipelineScheduleKind::one_f_one_b, layout, stage, m))
    if (a.kind == kind && a.micro_batch == mb) return a;
  ADD_FAILURE() << "no such action";
  return {};
}

TEST(PhantomPeerStages, SecondStageWaitsForTheFirstStagesTimeline) {
  const PipelineLayout layout = PipelineLayout::balanced(6, 2, 1);
  const int m = 4;
  PhantomPeerStages peers(PipelineScheduleKind::one_f_one_b, layout, 1);
  peers.begin(100.0, m);
  // Before anything is measured every action is taken to take no time: the input is there at the start.
  EXPECT_DOUBLE_EQ(peers.input_sent_at(find(layout, 1, m, Action::Kind::forward, 0)), 100.0);
  measure_step(peers, layout, 1, m, 1.0, 3.0);
  peers.begin(200.0, m);
  // Stage 0 (1F1B, pp = 2) runs F0 F1 B0 F2 B1 F3 B2 B3, stage 1 F0 B0 F1 B1 ...: stage 0's F0 [0,1], F1 [1,2];
  // stage 1's F0 [1,2], B0 [2,5]; stage 0's B0 [5,8], F2 [8,9]; stage 1's F1 [5,6], B1 [6,9]; stage 0's B1 [9,12],
  // F3 [12,13]. Stage 1's inputs leave at 1, 2, 9 and 13.
  EXPECT_DOUBLE_EQ(peers.input_sent_at(find(layout, 1, m, Action::Kind::forward, 0)), 201.0);
  EXPECT_DOUBLE_EQ(peers.input_sent_at(find(layout, 1, m, Action::Kind::forward, 1)), 202.0);
  EXPECT_DOUBLE_EQ(peers.input_sent_at(find(layout, 1, m, Action::Kind::forward, 2)), 209.0);
  EXPECT_DOUBLE_EQ(peers.input_sent_at(find(layout, 1, m, Action::Kind::forward, 3)), 213.0);
  // The step ends with stage 0's last backward: 4 + 4m (test_pipeline_timeline's hand count).
  EXPECT_DOUBLE_EQ(peers.end_at(), 200.0 + 4 + 4 * m);
  // The last stage takes no input gradient; the first stage's backward does, from the second's backward.
  EXPECT_THROW(peers.input_sent_at(find(layout, 1, m, Action::Kind::backward, 0)), Error);
  PhantomPeerStages first(PipelineScheduleKind::one_f_one_b, layout, 0);
  first.begin(0.0, m);
  measure_step(first, layout, 0, m, 1.0, 3.0);
  first.begin(0.0, m);
  EXPECT_DOUBLE_EQ(first.input_sent_at(find(layout, 0, m, Action::Kind::backward, 0)), 5.0);
}

}  // namespace
}  // namespace hzp::test
