// pipeline_timeline (hzp/schedulers/step/pipeline_timeline.hpp): the bubble each schedule implies against the closed
// forms, with equal chunks and instant messages: (pp − 1)/(m + pp − 1) of the step idle on every stage for GPipe and
// 1F1B, (pp − 1)/(v·m + pp − 1) for interleaved 1F1B (each chunk 1/v of a stage's work), at pp = 2 and 4, m = 4
// and 8; and the step's length by hand for a 2-stage 1F1B with unequal forward and backward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hzp/schedulers/step/pipeline_timeline.hpp"

namespace hzp::test {
namespace {

using schedulers::PipelineLayout;
using schedulers::PipelineScheduleKind;

TEST(PipelineTimeline, BubbleMatchesTheClosedForms) {
  for (int pp : {2, 4})
    for (int m : {4, 8})
      for (PipelineScheduleKind kind :
           {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved}) {
        const int v = kind == PipelineScheduleKind::interleaved ? 2 : 1;
        const PipelineLayout layout = PipelineLayout::balanced(pp * v * 2 + 2, pp, v);
        // A stage's work per micro-batch is 1 s forward and 2 s backward, split evenly over its v chunks.
        const std::vector<double> f(static_cast<std::size_t>(pp * v), 1.0 / v), b(f.size(), 2.0 / v);
        const schedulers::PipelineTimeline t = schedulers::pipeline_timeline(kind, layout, m, f, b);
        const double want = static_cast<double>(pp - 1) / (v * m + pp - 1);
        for (int s = 0; s < pp; ++s)
          EXPECT_NEAR(t.idle_fraction(s), want, 1e-12)
              << schedulers::to_string(kind) << " pp=" << pp << " m=" << m << " stage " << s;
        EXPECT_NEAR(t.makespan, 3.0 * (m + static_cast<double>(pp - 1) / v), 1e-9);
      }
}

TEST(PipelineTimeline, TwoStageOneFOneBByHand) {
  // Stage 0: F0 F1 B0 F2 B1 F3 B2 B3; stage 1: F0 B0 F1 B1 ... With F = 1 and B = 3 on each stage, stage 1's
  // first forward ends at 2, every later pair (B, F) of stage 1 waits for nothing: the step is
  // 1 (stage 0's F0) + m·(1 + 3) (stage 1's work) + 3 (stage 0's last backward) = 4 + 4m.
  const PipelineLayout layout = PipelineLayout::balanced(6, 2, 1);
  const int m = 4;
  const schedulers::PipelineTimeline t =
      schedulers::pipeline_timeline(PipelineScheduleKind::one_f_one_b, layout, m, {1.0, 1.0}, {3.0, 3.0});
  EXPECT_DOUBLE_EQ(t.makespan, 4.0 + 4.0 * m);
  EXPECT_DOUBLE_EQ(t.busy[0], 4.0 * m);
  EXPECT_DOUBLE_EQ(t.busy[1], 4.0 * m);
}

}  // namespace
}  // namespace hzp::test
