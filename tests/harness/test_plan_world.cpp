// A PlanWorld (step/plan_world.hpp) only memoizes: every rank's step description made with one world shared across
// the ranks equals the one made without it, event by event (place, stream, the call and its bytes, the group's
// members), for every engine that describes a step (asynchzp, zero1-3, hsdp, ddp and nd with tensor, context,
// pipeline and expert parallelism and its distributed optimizers; each takes its mesh and groups from the world),
// deterministic mode's verdict group included; and ranks of one group share its members' vector.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

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
    const char* preset = "tiny";
  };
  const Case cases[] = {
      {"asynchzp 8-4-2", "asynchzp", false, [](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2; }},
      {"asynchzp inline, deterministic", "asynchzp", true, [](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2, o.async = false; }},
      {"asynchzp rs step end", "asynchzp", false,
       [](O& o) { o.z1 = 8, o.z2 = 4, o.z3 = 2, o.step_end = O::StepEnd::reduce_scatter; }},
      {"asynchzp pp2 cp2", "asynchzp", false, [](O& o) { o.z1 = 4, o.z2 = 2, o.z3 = 2, o.pp = 2, o.cp = 2; }},
      {"zero1", "zero1", false, [](O&) {}},
      {"zero2, deterministic", "zero2", true, [](O&) {}},
      {"zero3", "zero3", false, [](O&) {}},
      {"hsdp 4", "hsdp", false, [](O& o) { o.group_size = 4; }},
      {"ddp", "ddp", false, [](O&) {}},
      {"ddp, deterministic", "ddp", true, [](O&) {}},
      {"nd tp2 cp2", "nd", false, [](O& o) { o.tp = 2, o.cp = 2; }},
      {"nd tp2 pp4", "nd", false, [](O& o) { o.tp = 2, o.pp = 4; }},
      {"nd tp2 pp2 cp2, distributed optimizer", "nd", false,
       [](O& o) { o.tp = 2, o.pp = 2, o.cp = 2, o.distributed_optimizer = true; }},
      {"nd ep2", "nd", false, [](O& o) { o.ep = 2; }, "tiny-moe"},
      {"nd ep2 pp2, expert optimizer", "nd", false, [](O& o) { o.ep = 2, o.pp = 2, o.distributed_optimizer = true; },
       "tiny-moe"},
  };
  for (const Case& c : cases) {
    const auto& preset = workloads::model_preset(c.preset);
    const auto spec = workloads::llama_spec(preset.model);
    const workloads::ParamLayout layout = workloads::llama_layout(preset.model);
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
    std::vector<StepDescription> shared_ds;
    for (int r = 0; r < in.world_size; ++r) {
      PlanInputs alone = in, shared = in;
      alone.rank = shared.rank = r;
      shared.world = &world;
      shared_ds.push_back(describe_step(c.scheduler, shared));
      expect_same(describe_step(c.scheduler, alone), shared_ds.back(), std::string(c.name) + ", rank " + std::to_string(r));
    }
    // The world made each group once: where two ranks' events of one place name equal groups, they point to one
    // vector (no rank holds a copy of its own).
    std::size_t copies = 0;
    for (const StepDescription& a : shared_ds)
      for (const StepDescription& b : shared_ds)
        for (std::size_t i = 0; i < std::min(a.events.size(), b.events.size()); ++i) {
          const StepEvent &x = a.events[i], &y = b.events[i];
          if (x.collective.group == y.collective.group && x.members == y.members && !x.members.same(y.members)) ++copies;
        }
    EXPECT_EQ(copies, 0u) << c.name;
  }
}

}  // namespace
}  // namespace hzp::schedulers
