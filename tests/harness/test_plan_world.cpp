// A PlanWorld (step/plan_world.hpp) only memoizes: every rank's step description made with one world shared across
// the ranks equals the one made without it, event by event (place, stream, the call and its bytes, the group's
// members), for asynchzp's layouts (its groups come from the world), deterministic mode's verdict group included,
// and for engines that take only the mesh from it.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::schedulers {
namespace {

void expect_same(const StepDescription& a, const StepDescription& b, const std::string& what) {
  ASSERT_EQ(a.events.size(), b.events.size()) << what;
  EXPECT_EQ(a.calls, b.calls) << what;
  EXPECT_EQ(a.prefetch, b.prefetch) << what;
  EXPECT_EQ(a.plan.to_json(), b.plan.to_json()) << what;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const StepEvent &x = a.events[i], &y = b.events[i];
    const std::string at = what + ", event " + std::to_string(i);
    EXPECT_EQ(x.call, y.call) << at;
    EXPECT_EQ(x.stream, y.stream) << at;
    EXPECT_EQ(x.place, y.place) << at;
    EXPECT_EQ(x.members.get(), y.members.get()) << at;
    EXPECT_EQ(x.peer, y.peer) << at;
    EXPECT_EQ(x.rounds, y.rounds) << at;
    EXPECT_EQ(x.blocks, y.blocks) << at;
    EXPECT_EQ(x.collective.op, y.collective.op) << at;
    EXPECT_EQ(x.collective.group, y.collective.group) << at;
    EXPECT_EQ(x.collective.calls, y.collective.calls) << at;
    EXPECT_EQ(x.collective.elements, y.collective.elements) << at;
    EXPECT_EQ(x.collective.bytes, y.collective.bytes) << at;
  }
}

TEST(PlanWorld, DescriptionsEqualThoseWithoutIt) {
  using O = SchedulerOptions;
  struct Case {
    const char* name;
    const char* scheduler;
    bool deterministic;
    void (*set)(O&);
  };
  const Case cases[] = {
      {"asynchzp 8-4-2", "asynchzp", false, [](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2; }},
      {"asynchzp inline, deterministic", "asynchzp", true, [](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2, o.async = false; }},
      {"asynchzp rs step end", "asynchzp", false,
       [](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2, o.step_end = O::StepEnd::reduce_scatter; }},
      {"asynchzp pp2 cp2", "asynchzp", false, [](O& o) { o.z1 = 4, o.z2 = 2, o.z3 = 2, o.pp = 2, o.cp = 2; }},
      {"zero3", "zero3", false, [](O&) {}},
      {"nd tp2 cp2", "nd", false, [](O& o) { o.tp = 2, o.cp = 2; }},
  };
  const auto& preset = workloads::model_preset("tiny");
  const auto spec = workloads::llama_spec(preset.model);
  const workloads::ParamLayout layout = workloads::llama_layout(preset.model);
  for (const Case& c : cases) {
    PlanInputs in;
    in.layout = &layout;
    in.model = spec.get();
    in.train = preset.train;
    in.train.global_batch = 32;
    in.train.micro_batch_size = 1;
    in.train.deterministic = c.deterministic;
    in.world_size = 16;
    in.ranks_per_node = 4;
    in.small_message_bytes = 4096;
    c.set(in.options);
    PlanWorld world(in.world_size, in.ranks_per_node);
    for (int r = 0; r < in.world_size; ++r) {
      PlanInputs alone = in, shared = in;
      alone.rank = shared.rank = r;
      shared.world = &world;
      expect_same(describe_step(c.scheduler, alone), describe_step(c.scheduler, shared),
                  std::string(c.name) + ", rank " + std::to_string(r));
    }
  }
}

}  // namespace
}  // namespace hzp::schedulers
