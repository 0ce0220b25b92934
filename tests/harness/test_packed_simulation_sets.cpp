// simulate_packed itself (packed_simulation.cpp, compiled in: it belongs to the hzpbench program), on fixed unit times
// and links, never a duration measured here: how many ranks it simulates together for pp2 with a stage per node, and,
// with one document per sequence (factors of exactly 1), that its steps are the unpacked simulation's bit for bit.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hzp/harness/packing_imbalance.hpp"
#include "hzp/harness/step_fold.hpp"
#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/presets.hpp"
#include "packed_simulation.hpp"
#include "run_setup.hpp"
#include "simulated_step_checks.hpp"

namespace hzp::harness {
namespace {

struct Layout {
  const char* scheduler;
  int world, per_node;
  bool nic_per_rank;
};

// What simulate_packed needs of a run (the scheduler, the packing and the batch) for tiny in pp2 at `l.world` ranks,
// 8 sequences of one micro-batch each, in documents longer than any sequence (σ = 0: one document per sequence).
struct PackedRun {
  RunSetup setup;
  std::unique_ptr<workloads::ParamLayout> layout;
  schedulers::PlanInputs in;
};

PackedRun tiny_pp2(const Layout& l) {
  const auto& preset = workloads::model_preset("tiny");
  PackedRun run;
  run.setup.opt.scheduler = l.scheduler;
  run.setup.model = workloads::llama_spec(preset.model);
  run.setup.train = preset.train;
  run.setup.train.global_batch = 8;
  run.setup.train.micro_batch_size = 1;
  run.setup.world_size = l.world;
  run.setup.data.packing.kind = workloads::PackingKind::documents;
  run.setup.data.packing.mean_tokens = 1e12;
  run.setup.data.packing.sigma = 0;
  run.setup.data.packing.seed = 7;
  run.layout = std::make_unique<workloads::ParamLayout>(workloads::llama_layout(preset.model));
  run.in.layout = run.layout.get();
  run.in.model = run.setup.model.get();
  run.in.train = run.setup.train;
  run.in.world_size = l.world;
  run.in.ranks_per_node = l.per_node;
  run.in.small_message_bytes = 0;
  run.in.options.pp = 2;
  run.in.options.group_size = 2;
  run.in.options.z1 = l.world / 2;
  run.in.options.z2 = run.in.options.z3 = 2;
  return run;
}


// pp2 with a stage per node (W = 4 in nodes of 2, W = 8 in nodes of 4: rank 0's peer stage is on another node):
// a stage's replicas are its node's ranks and one data-parallel group, so their gradient collective couples them and
// the pipeline couples the two nodes: one join set of all W ranks, on a shared interface and with a NIC per rank
// alike. With one document per sequence the steps are simulate_world's bit for bit (its pipelines of whole nodes on
// one clock per node, NodeInterface::shared, which simulate_packed chooses for sets with stages). asynchzp with a NIC
// per rank is left out: the unpacked simulation runs its pipelines apart and unequal shards then differ by a join
// wait (test_packed_simulation.cpp). Removing simulate_packed's node-mates join leaves every figure here the same
// (checked 2026-11-27): these layouts' collectives join the nodes already.
TEST(SimulatePacked, AStagePerNodeIsOneSetAndTheUnpackedSimulation) {
  for (const Layout& l : {Layout{"nd", 4, 2, false}, Layout{"nd", 4, 2, true}, Layout{"nd", 8, 4, false},
                          Layout{"nd", 8, 4, true}, Layout{"asynchzp", 4, 2, false}, Layout{"asynchzp", 8, 4, false}}) {
    const std::string name = std::string(l.scheduler) + " pp2 at W = " + std::to_string(l.world) + " in nodes of " +
                             std::to_string(l.per_node) + (l.nic_per_rank ? ", a NIC per rank" : "");
    PackedRun run = tiny_pp2(l);
    const auto describe = [&](int r) {
      schedulers::PlanInputs in = run.in;
      in.rank = r;
      return schedulers::describe_step(l.scheduler, in);
    };
    const std::vector<int>* stages = pipeline_members(describe(0));
    ASSERT_NE(stages, nullptr) << name;
    for (int m : *stages) EXPECT_TRUE(m == 0 || m / l.per_node != 0) << name << ": peer stage " << m << " on node 0";
    const auto n = static_cast<std::size_t>(run.layout->num_units());
    const UnitTimes t{std::vector<double>(n, 0.01), std::vector<double>(n, 0.03), std::vector<double>(n, 0.4), {}, {}};
    UnitTimes packed_t = t;  // as cmd_simulate passes them: the attention share of the transformer blocks only
    packed_t.attention_share = block_attention_shares(*run.layout, t.attention_share);
    const SimulatorLinks links = test::slow_links(l.per_node, l.nic_per_rank);
    const JoinSets js = simulate_packed(run.setup, run.in.options, l.world, describe, packed_t, links);
    EXPECT_EQ(js.sets, 1) << name;
    EXPECT_EQ(js.largest, l.world) << name;
    const std::vector<SimulatedStep> unpacked = simulate_world(l.world, describe, t, links, false);
    ASSERT_EQ(js.steps.size(), unpacked.size()) << name;
    for (int r = 0; r < l.world; ++r)
      test::expect_same_step(js.steps[static_cast<std::size_t>(r)], unpacked[static_cast<std::size_t>(r)],
                             name + " rank " + std::to_string(r));
  }
}

}  // namespace
}  // namespace hzp::harness
