// What the nd tests share: one run of nd over a world (the model built over the mesh's tensor-parallel group and,
// with pipeline stages, holding this rank's stage), and a visitor capturing a state dump's gradients.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data_parallel_test_util.hpp"
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
    setup.model = workloads::make_llama(setup.model_config, spec.precision, {groups->tensor(), o.sequence_parallel}, cut);
    schedulers::SchedulerArgs a = setup.args();
    a.world = &world;
    a.topology = &topology;
    a.groups = groups.get();
    a.options = o;
    scheduler = schedulers::make_scheduler("nd", a);
  }
  schedulers::StepStats step(std::int64_t i) { return scheduler->step({i, setup.source.get()}); }

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

}  // namespace hzp::test
