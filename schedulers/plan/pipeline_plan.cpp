// PipelinePlan (pipeline_plan.hpp).
#include "plan/pipeline_plan.hpp"

#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::schedulers {
namespace {

// SharedStageGrads' group: the ranks at this rank's place in the other axes on the stages holding a shared unit.
// A stage is in it when its layout holds shared units, by the engines' own rule (shared_units).
// Made once per pipeline group when the caller describes many ranks (plan_world.hpp).
PlanGroup shared_stage_group(const PlanInputs& in, const workloads::ParamLayout& whole, const workloads::StageCut& cut,
                             const GroupMembers& stages) {
  return {"embedding", plan_group(in, "pipeline embedding from " + std::to_string(stages.front()), [&] {
            std::vector<int> members;
            for (std::size_t s = 0; s < stages.size(); ++s)
              if (!shared_units(workloads::stage_layout(whole, {cut.stage_of_unit, static_cast<int>(s)})).empty())
                members.push_back(stages[s]);
            return members;
          })};
}

}  // namespace

PipelinePlan::PipelinePlan(const PlanInputs& in, const ParallelDims& dims, const coll::RankMesh& mesh,
                           const workloads::ParamLayout& whole)
    : pp_(dims.pp) {
  if (pp_ == 1) {
    layout_ = std::make_unique<workloads::ParamLayout>(whole);
    return;
  }
  if (in.model == nullptr)
    HZP_THROW(ConfigError, "the plan at scheduler.pp = ", pp_, " needs the model (its activations between stages), "
              "not only its layout");
  pipeline_ = std::make_unique<PipelineLayout>(pipeline_layout_from(in.options, whole.num_units()));
  stage_ = mesh.position(kAxisPipeline, in.rank);
  pp_group_ = {"pp", plan_mesh_group(in, mesh, kAxisPipeline)};
  const workloads::StageCut cut = pipeline_->cut(stage_);
  layout_ = std::make_unique<workloads::ParamLayout>(workloads::stage_layout(whole, cut));
  embedding_ = shared_stage_group(in, whole, cut, pp_group_.members);
  boundary_ = in.model->boundary_elements(in.train.micro_batch_size, dims.tp, in.options.sequence_parallel, dims.cp);
  adt_ = workloads::activation_dtype(in.train.precision);
}

std::vector<Action> PipelinePlan::actions(const SchedulerOptions& options, std::int64_t micro_batches) const {
  if (!pipeline_) return {};
  return pipeline_schedule(options.schedule, *pipeline_, stage_, static_cast<int>(micro_batches));
}

// PipelineStage::run: before an action's first unit's forward its input arrives from the previous chunk's stage;
// after its last unit's forward the output leaves for the next; backward the other way round.
void PipelinePlan::unit(const Action& a, int u, CollectiveLedger& out) const {
  if (!active()) return;
  const int units = layout_->num_units();
  const bool fwd = a.kind == Action::Kind::forward;
  const int prev = (stage_ + pp_ - 1) % pp_, next = (stage_ + 1) % pp_;
  // A receive is waited for before the unit; a send starts after it without waiting (the simulator's `pipeline`
  // stream: both are the stage's pipeline wait when waited for).
  const bool recv_here = fwd ? (u == a.first_unit && a.first_unit > 0) : (u == a.end_unit - 1 && a.end_unit < units);
  const bool send_here = fwd ? (u == a.end_unit - 1 && a.end_unit < units) : (u == a.first_unit && a.first_unit > 0);
  if (recv_here) {
    out.stream(CommStream::pipeline, CommPlace::before_unit);
    out.recv(pp_group_, fwd ? prev : next, boundary_, adt_, 1,
             fwd ? "per micro-batch (activation in)" : "per micro-batch (gradient in)");
  }
  if (send_here) {
    out.stream(CommStream::pipeline, CommPlace::after_unit);
    out.send(pp_group_, fwd ? next : prev, boundary_, adt_, 1,
             fwd ? "per micro-batch (activation out)" : "per micro-batch (gradient out)");
  }
  out.stream(CommStream::compute);
}

void PipelinePlan::step_end(std::int64_t micro_batches_per_rank, CollectiveLedger& out) const {
  if (!active()) return;
  out.stream(CommStream::pipeline);  // where the stages meet (StepDriver::run_stage): pipeline wait
  StepDriver::plan_pipeline_collectives(pp_group_, micro_batches_per_rank, out);
  out.stream(CommStream::compute);
}

}  // namespace hzp::schedulers
