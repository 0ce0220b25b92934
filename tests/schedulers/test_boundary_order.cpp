// check_boundary_order: on every link of every schedule the sender's sends and the receiver's receives come in the
// same order (what NCCL's order matching needs on a GPU, pipeline_links.hpp), the receives taken in the order a
// stage on a GPU posts them (receive_posts: an action ahead of their readers); a schedule or a post order that would
// swap two messages is refused naming the link and both messages. receive_posts is checked against its rule
// computed here from the schedule alone.
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/step/boundary_order.hpp"
#include "../support/throws_with.hpp"

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

// Every receive of every schedule posted once, one action ahead of its reader (or right after the forward that made
// the output its gradient fills), in the readers' order on each link.
TEST(ReceivePosts, PostEachReceiveAnActionAheadOfItsReader) {
  struct Case {
    Kind kind;
    int pp, v, m;
  };
  std::vector<Case> cases;
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 12; ++m)
      for (Kind kind : {Kind::gpipe, Kind::one_f_one_b}) cases.push_back({kind, pp, 1, m});
  for (int pp = 2; pp <= 4; ++pp)
    for (int v = 2; v <= 3; ++v)
      for (int m = pp; m <= 4 * pp; m += pp) cases.push_back({Kind::interleaved, pp, v, m});
  int ahead = 0, after_forward = 0;
  for (const Case& c : cases) {
    const PipelineLayout l = PipelineLayout::balanced(c.pp * c.v + 2, c.pp, c.v);
    for (int s = 0; s < c.pp; ++s) {
      const std::vector<Action> actions = pipeline_schedule(c.kind, l, s, c.m);
      // The expected posts, from the rule: reader i's receive before action max(i - 1, forward + 1).
      std::vector<ReceivePost> expected;
      std::map<std::pair<int, int>, std::size_t> forward_at;
      for (std::size_t i = 0; i < actions.size(); ++i) {
        const int k = l.chunk_at(actions[i]);
        const std::size_t prev = i == 0 ? 0 : i - 1;
        if (actions[i].kind == Action::Kind::forward) {
          forward_at[{actions[i].micro_batch, k}] = i;
          if (k > 0) expected.push_back({prev, i, false});
        } else if (k < l.chunks() - 1) {
          const std::size_t f = forward_at.at({actions[i].micro_batch, k}) + 1;
          expected.push_back({f > prev ? f : prev, i, true});
          ++(f > prev ? after_forward : ahead);
        }
      }
      const std::vector<ReceivePost> posts = receive_posts(l, actions);
      ASSERT_EQ(posts.size(), expected.size()) << to_string(c.kind) << " pp " << c.pp << " stage " << s;
      for (const ReceivePost& p : posts) {
        bool found = false;
        for (const ReceivePost& e : expected) found = found || e == p;
        EXPECT_TRUE(found) << "post before " << p.at << " for " << p.consumer << ", " << to_string(c.kind);
      }
      for (std::size_t j = 1; j < posts.size(); ++j) {
        EXPECT_LE(posts[j - 1].at, posts[j].at);
        if (posts[j - 1].gradient == posts[j].gradient) EXPECT_LT(posts[j - 1].consumer, posts[j].consumer);
      }
    }
  }
  // Both branches of the rule are taken somewhere (so the comparison above covers each).
  EXPECT_GT(ahead, 0);
  EXPECT_GT(after_forward, 0);
}

std::vector<std::vector<ReceivePost>> every_post(const PipelineLayout& l, const std::vector<std::vector<Action>>& all) {
  std::vector<std::vector<ReceivePost>> posts;
  for (const std::vector<Action>& actions : all) posts.push_back(receive_posts(l, actions));
  return posts;
}

TEST(BoundaryOrder, RefusesPostsThatTakeTwoGradientsTheOtherWayRound) {
  // 1F1B at pp 2 over 4 micro-batches: stage 0 receives four gradients; posting two of them the other way round
  // (each still before its reader) would have NCCL fill micro-batch 1's slot with micro-batch 0's gradient.
  const PipelineLayout l = PipelineLayout::balanced(4, 2, 1);
  const std::vector<std::vector<Action>> all = every_stage(Kind::one_f_one_b, l, 4);
  std::vector<std::vector<ReceivePost>> posts = every_post(l, all);
  EXPECT_NO_THROW(check_boundary_order(l, all, posts));
  std::vector<ReceivePost>& mine = posts[0];
  ASSERT_EQ(mine.size(), 4u);
  // Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3: B0's gradient is posted before F1, B1's before F2.
  ASSERT_EQ(mine[0], (ReceivePost{1, 2, true}));
  ASSERT_EQ(mine[1], (ReceivePost{3, 4, true}));
  // B1's first, then B0's, both before F1's successor B0 (after both forwards: slots that exist).
  mine[0] = {2, 4, true};
  mine[1] = {2, 2, true};
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { check_boundary_order(l, all, posts); },
                                                   {"gradients from stage 1 to stage 0 differ at message 0",
                                                    "sent (micro-batch 0, chunk 0), received (micro-batch 1, chunk 0)"}));
}

TEST(BoundaryOrder, RefusesAPostAfterItsReaderOrMissing) {
  const PipelineLayout l = PipelineLayout::balanced(4, 2, 1);
  const std::vector<std::vector<Action>> all = every_stage(Kind::one_f_one_b, l, 2);
  std::vector<std::vector<ReceivePost>> late = every_post(l, all);
  late[1][0].at = late[1][0].consumer + 1;
  EXPECT_THROW(check_boundary_order(l, all, late), PreconditionError);
  std::vector<std::vector<ReceivePost>> missing = every_post(l, all);
  missing[1].pop_back();
  EXPECT_THROW(check_boundary_order(l, all, missing), PreconditionError);
  // Stage 0 (F0 F1 B0 B1 at pp 2, m 2): B1's gradient posted before F1 has made the output it is the gradient of.
  std::vector<std::vector<ReceivePost>> early = every_post(l, all);
  ASSERT_EQ(early[0].back(), (ReceivePost{2, 3, true}));
  early[0].back().at = 1;
  EXPECT_THROW(check_boundary_order(l, all, early), PreconditionError);
  std::vector<std::vector<ReceivePost>> twice = every_post(l, all);
  twice[1].push_back(twice[1].front());
  EXPECT_THROW(check_boundary_order(l, all, twice), PreconditionError);
}

TEST(BoundaryOrder, RefusesAScheduleListOfTheWrongLength) {
  const PipelineLayout l = PipelineLayout::balanced(4, 2, 1);
  EXPECT_THROW(check_boundary_order(l, {pipeline_schedule(Kind::gpipe, l, 0, 2)}), PreconditionError);
}

}  // namespace
}  // namespace hzp::schedulers
