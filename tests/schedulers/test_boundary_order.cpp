// check_boundary_order: on every link of every schedule the sender's sends and the receiver's receives come in the
// same order (what NCCL's order matching needs on a GPU, pipeline_links.hpp), and a schedule that would swap two
// messages is refused naming the link and both messages.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/step/boundary_order.hpp"

namespace hzp::schedulers {
namespace {

using Kind = PipelineScheduleKind;

std::vector<std::vector<Action>> every_stage(Kind kind, const PipelineLayout& l, int m) {
  std::vector<std::vector<Action>> all;
  for (int s = 0; s < l.pp; ++s) all.push_back(pipeline_schedule(kind, l, s, m));
  return all;
}

TEST(BoundaryOrder, EveryScheduleSendsInTheOrderItsReceiverReceives) {
  int checked = 0;
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 12; ++m)
      for (Kind kind : {Kind::gpipe, Kind::one_f_one_b}) {
        const PipelineLayout l = PipelineLayout::balanced(pp + 2, pp, 1);
        EXPECT_NO_THROW(check_boundary_order(l, every_stage(kind, l, m))) << to_string(kind) << " pp " << pp << " m " << m;
        ++checked;
      }
  for (int pp = 2; pp <= 4; ++pp)
    for (int v = 2; v <= 3; ++v)
      for (int m = pp; m <= 4 * pp; m += pp) {
        const PipelineLayout l = PipelineLayout::balanced(pp * v + 2, pp, v);
        EXPECT_NO_THROW(check_boundary_order(l, every_stage(Kind::interleaved, l, m)))
            << "interleaved pp " << pp << " v " << v << " m " << m;
        ++checked;
      }
  EXPECT_EQ(checked, 7 * 12 * 2 + 3 * 2 * 4);
}

TEST(BoundaryOrder, RefusesAReceiverThatTakesTwoActivationsTheOtherWayRound) {
  const PipelineLayout l = PipelineLayout::balanced(4, 2, 1);
  std::vector<std::vector<Action>> all = every_stage(Kind::gpipe, l, 2);
  // Stage 1 runs micro-batch 1's forward first: a valid schedule of its own (check_stage_schedule takes it), whose
  // receives NCCL would match with stage 0's sends crosswise.
  std::swap(all[1][0], all[1][1]);
  EXPECT_NO_THROW(check_stage_schedule(all[1], l, 1, 2));
  try {
    check_boundary_order(l, all);
    FAIL() << "a swapped pair of receives was accepted";
  } catch (const PreconditionError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("activations from stage 0 to stage 1 differ at message 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sent (micro-batch 0, chunk 1), received (micro-batch 1, chunk 1)"), std::string::npos) << msg;
  }
}

TEST(BoundaryOrder, RefusesGradientsInAnotherOrder) {
  const PipelineLayout l = PipelineLayout::balanced(4, 2, 1);
  std::vector<std::vector<Action>> all = every_stage(Kind::gpipe, l, 2);
  std::swap(all[0][2], all[0][3]);  // stage 0 takes micro-batch 0's gradient before micro-batch 1's
  EXPECT_THROW(check_boundary_order(l, all), PreconditionError);
}

TEST(BoundaryOrder, RefusesAScheduleListOfTheWrongLength) {
  const PipelineLayout l = PipelineLayout::balanced(4, 2, 1);
  EXPECT_THROW(check_boundary_order(l, {pipeline_schedule(Kind::gpipe, l, 0, 2)}), PreconditionError);
}

}  // namespace
}  // namespace hzp::schedulers
