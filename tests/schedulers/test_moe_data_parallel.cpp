// The MoE decoder under the data-parallel engines (issue 21) under mpiexec: expert weights are ordinary parameters
// of their block, so ddp, zero1/2/3, hsdp, asynchzp and nd at tp = 1 shard and gather them unchanged; the balancing
// bias is not a parameter, and the step driver sums each step's load over the data-parallel group before the
// update. In deterministic mode every configuration's losses, norms, final master parameters AND final balancing
// bias must be bitwise those of `none` (one rank, the whole global batch's load by construction) on tiny-moe,
// with a bias rate large enough that the bias changes the routing within the run. hzpbench plan's activation
// estimate for each configuration equals a step's peak of the activation tag.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>

#include "data_parallel_test_util.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

constexpr std::int64_t kSteps = 6;

// tiny-moe's MoE keys on tiny (TinySetup's model), with a bias rate 50x DeepSeek-V3's, so that the bias moves
// routing decisions within six steps (a replica updating from its own half of the load would then diverge).
void tiny_moe(workloads::LlamaConfig& c) {
  c.moe = workloads::model_preset("tiny-moe").model.moe;
  c.moe.bias_update_rate = 0.05;
}

struct Outcome {
  std::vector<double> losses, norms, bias;
  std::vector<float> master;
  std::uint64_t activation_peak = 0, planned_activation_peak = 0;  // one more step's, and hzpbench plan's estimate
};

std::vector<double> metric(const workloads::Workload& model, const std::string& name) {
  for (const workloads::StepMetric& m : model.step_metrics())
    if (m.name == name) return m.values;
  ADD_FAILURE() << "the model reports no " << name;
  return {};
}

Outcome run(const Variant* v, coll::Communicator* world) {
  TinySetup s(Precision::fp32, tiny_moe);
  schedulers::SchedulerArgs a = s.args();
  a.train.deterministic = true;
  std::unique_ptr<schedulers::Scheduler> sched;
  if (v != nullptr) {
    a.world = world;
    a.options = v->options;
    sched = schedulers::make_scheduler(v->scheduler, a);
  } else {
    sched = std::make_unique<schedulers::NoneScheduler>(a);
  }
  Outcome o;
  for (std::int64_t k = 0; k < kSteps; ++k) {
    const schedulers::StepStats st = sched->step({k, s.source.get()});
    o.losses.push_back(st.loss);
    o.norms.push_back(st.grad_norm);
  }
  o.bias = metric(*s.model, "moe/bias");
  if (v != nullptr) {
    o.master = dynamic_cast<schedulers::DataParallelScheduler&>(*sched).gather_master_params();
    // The plan's activation estimate (the MoE blocks' ledgers walked over the rank's schedule) against a step's peak
    // of the allocator's activation tag: one micro-batch at a time, so exact.
    const std::unique_ptr<workloads::ModelSpec> spec = workloads::llama_spec(s.model_config);
    schedulers::PlanInputs in;
    in.layout = &s.model->layout();
    in.model = spec.get();
    in.train = a.train;
    in.options = v->options;
    in.world_size = world->size();
    in.ranks_per_node = std::max(1, world_size() / 2);
    in.rank = world->rank();
    o.planned_activation_peak = schedulers::plan_scheduler(v->scheduler, in).activation_peak_bytes;
    s.alloc->reset_peaks();
    sched->step({kSteps, s.source.get()});
    o.activation_peak = s.alloc->stats().tag(AllocationTag::activation).peak_requested_bytes;
  } else {
    const ConstTensorView m = dynamic_cast<schedulers::NoneScheduler&>(*sched).master_params();
    o.master.assign(m.as<const float>(), m.as<const float>() + m.numel());
  }
  return o;
}

std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }

TEST(MoeDataParallel, EveryEngineIsBitwiseNoneWithTheBiasInStep) {
  run_then_barrier([] {
    const Outcome ref = run(nullptr, nullptr);
    // The bias moved (so the test could see replicas disagree) and is not the same for every expert.
    ASSERT_FALSE(ref.bias.empty());
    double lo = ref.bias.front(), hi = ref.bias.front();
    for (double b : ref.bias) lo = std::min(lo, b), hi = std::max(hi, b);
    EXPECT_GT(hi - lo, 0.05) << "the bias did not move apart over " << kSteps << " steps";
    auto world = make_world(std::max(1, world_size() / 2));
    for (const Variant& v : all_variants(world_size())) {
      SCOPED_TRACE(v.label + " W=" + std::to_string(world_size()));
      const Outcome got = run(&v, world.get());
      for (std::int64_t k = 0; k < kSteps; ++k) {
        EXPECT_EQ(bits(got.losses[k]), bits(ref.losses[k])) << "step " << k << ": " << got.losses[k] << " vs none "
                                                            << ref.losses[k];
        EXPECT_EQ(bits(got.norms[k]), bits(ref.norms[k])) << "step " << k;
      }
      ASSERT_EQ(got.bias.size(), ref.bias.size());
      for (std::size_t i = 0; i < ref.bias.size(); ++i) EXPECT_EQ(bits(got.bias[i]), bits(ref.bias[i])) << "bias " << i;
      ASSERT_EQ(got.master.size(), ref.master.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < ref.master.size(); ++i)
        differ += std::bit_cast<std::uint32_t>(got.master[i]) != std::bit_cast<std::uint32_t>(ref.master[i]);
      EXPECT_EQ(differ, 0u) << "final master parameters differing from none's";
      EXPECT_GT(got.planned_activation_peak, 0u);
      EXPECT_EQ(got.activation_peak, got.planned_activation_peak) << "hzpbench plan's activation estimate";
      if (world_rank() == 0)
        std::printf("[moe data parallel] W=%d %-40s %lld steps: losses, norms, master parameters and bias bitwise "
                    "none's: %s\n",
                    world_size(), v.label.c_str(), static_cast<long long>(kSteps),
                    ::testing::Test::HasFailure() ? "NO" : "yes");
    }
  }, 600);
}

}  // namespace
}  // namespace hzp::test
