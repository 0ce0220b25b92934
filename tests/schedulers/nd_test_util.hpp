// What the nd tests share: one run of nd over a world (the model built over the mesh's tensor- and context-parallel
// groups and, with pipeline stages, holding this rank's stage), and a visitor capturing a state dump's gradients.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data_parallel_test_util.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {

/// What an NdRun is made of: nd's options, an edit of tiny's shape, and the training settings tests vary.
struct NdRunSpec {
  schedulers::SchedulerOptions options;
  std::function<void(workloads::LlamaConfig&)> shape;
  bool recompute = false;
  bool deterministic = false;
  std::int64_t global_batch = 0;  ///< 0: tiny's
  workloads::Precision precision = workloads::Precision::fp32;
};

/// One nd run over `world` (every rank of it), laid out on (a copy of) `topology`.
struct NdRun {
  coll::Topology topology;
  TinySetup setup;
  std::unique_ptr<schedulers::ProcessGroups> groups;
  std::unique_ptr<schedulers::Scheduler> scheduler;

  NdRun(coll::Communicator& world, const coll::Topology& topo, const NdRunSpec& spec)
      : topology(topo), setup(spec.precision, spec.shape) {
    setup.train.recompute = spec.recompute;
    setup.train.deterministic = spec.deterministic;
    if (spec.global_batch > 0) setup.train.global_batch = spec.global_batch;
    const schedulers::SchedulerOptions& o = spec.options;
    groups = std::make_unique<schedulers::ProcessGroups>(
        world, schedulers::scheduler_parallel_dims("nd", o, world.size()), topology);
    const workloads::StageCut cut =
        o.pp > 1 ? schedulers::pipeline_layout_from(o, setup.model->layout().num_units()).cut(groups->pipeline()->rank())
                 : workloads::StageCut{};
    setup.model = workloads::make_llama(setup.model_config, spec.precision, {groups->tensor(), o.sequence_parallel}, cut,
                                        {groups->context()});
    schedulers::SchedulerArgs a = setup.args();
    a.world = &world;
    a.topology = &topology;
    a.groups = groups.get();
    a.options = o;
    scheduler = schedulers::make_scheduler("nd", a);
  }
  schedulers::StepStats step(std::int64_t i) { return scheduler->step({i, setup.source.get()}); }

  /// Runs steps 0 and 1 and returns the counters' delta of step 1 on `world` (buckets settle on the first step).
  coll::CounterSnapshot second_step_counters(coll::Communicator& world) {
    step(0);
    const coll::CounterSnapshot before = world.counters().snapshot();
    step(1);
    return world.counters().delta(before);
  }

  /// nd's plan for this run's model, training settings and `options`, for `rank` of `world_size`.
  schedulers::SchedulerPlan plan(const schedulers::SchedulerOptions& options, int world_size, int rank) const {
    const std::unique_ptr<workloads::ModelSpec> spec = workloads::llama_spec(setup.model_config);
    const workloads::ParamLayout whole = spec->layout();
    schedulers::PlanInputs in;
    in.layout = &whole;
    in.model = spec.get();
    in.train = setup.train;
    in.options = options;
    in.world_size = world_size;
    in.rank = rank;
    return schedulers::plan_scheduler("nd", in);
  }
};

/// Captures the gradient tensors of a state dump, by name.
class GradCapture final : public schedulers::StateVisitor {
 public:
  void tensor(std::string_view component, std::string_view name, ConstTensorView full) override {
    if (component != "grad") return;
    const auto* p = full.as<const float>();
    grads[std::string(name)] = std::vector<float>(p, p + full.numel());
  }
  std::map<std::string, std::vector<float>> grads;
};

/// After step 0 of `none` and of `nd` (tensor parallelism off): every gradient tensor nd's rank holds against none's
/// of the same name, to `tolerance` relative L2.
inline void expect_step0_grads_match_none(schedulers::Scheduler& none, NdRun& nd, const std::string& label,
                                          double tolerance = 1e-5) {
  GradCapture g_none;
  none.visit_state(g_none);
  auto& dp = dynamic_cast<schedulers::DataParallelScheduler&>(*nd.scheduler);
  const std::vector<float> mine = dp.gather_gradient();
  const workloads::ParamLayout& layout = nd.setup.model->layout();
  ASSERT_EQ(static_cast<std::int64_t>(mine.size()), layout.total_numel()) << label;
  int seen = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (int t = 0; t < static_cast<int>(layout.unit(u).tensors.size()); ++t) {
      const workloads::ParamTensor& pt = layout.unit(u).tensors[static_cast<std::size_t>(t)];
      const auto it = g_none.grads.find(pt.name);
      ASSERT_TRUE(it != g_none.grads.end()) << label << ": " << pt.name;
      ASSERT_EQ(static_cast<std::int64_t>(it->second.size()), pt.numel()) << label << ": " << pt.name;
      EXPECT_LE(rel_l2(mine.data() + layout.tensor_offset(u, t), it->second.data(), pt.numel()), tolerance)
          << label << ": step-0 gradient of " << pt.name;
      ++seen;
    }
  EXPECT_GT(seen, 0) << label;
}

}  // namespace hzp::test
