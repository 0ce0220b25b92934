// nd's declaration for the plan (plan/engine_plans.hpp): the data-parallel engine's (ddp's, or zero1's as the
// distributed optimizer) over the rank's tensor-parallel pieces of its pipeline stage, and around each unit the
// collectives the model itself issues over the tensor-parallel group, as the model declares them
// (ModelSpec::tensor_parallel_calls). With pipeline stages the walk is the stage's schedule, each action receiving
// its input (or its output's gradient) from the neighbouring stage and sending its output (or its input's
// gradient) on, the tied table's two stages all-reduce its gradient, and the last stage's losses are summed over
// the pipeline group. With context parallelism each block's ring attention sends its K and V blocks (and in
// backward their gradients) around the cp group, as the model declares them (ModelSpec::context_parallel_messages),
// the gradients are summed over data × context, and each micro-batch's loss shares are summed over cp.
#include <optional>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "plan/context_parallel_plan.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {
namespace {

class NdPlan final : public EnginePlan {
 public:
  explicit NdPlan(const PlanInputs& in) : dims_(nd_parallel_dims(in.options, in.world_size)) {
    if (in.model == nullptr && (dims_.tp > 1 || dims_.pp > 1 || dims_.cp > 1))
      HZP_THROW(ConfigError, "the plan of scheduler nd at scheduler.tp = ", dims_.tp, ", scheduler.cp = ", dims_.cp,
                ", scheduler.pp = ", dims_.pp, " needs the model (its tensor-parallel pieces and collectives, its "
                "ring attention's messages, its activations between stages), not only its layout");
    const coll::RankMesh mesh = dims_.mesh(plan_topology(in));  // refuses tp across nodes unless allowed
    tp_ = {"tp", mesh.group(kAxisTensor, in.rank)};
    cp_ = std::make_unique<ContextParallelPlan>(in, dims_, mesh);
    const int tp_rank = mesh.position(kAxisTensor, in.rank);
    // tp = 1: the whole layout, and the model issues no collective of its own.
    const workloads::ParamLayout pieces = in.model ? in.model->tensor_parallel_layout(dims_.tp, tp_rank) : *in.layout;
    std::optional<PipelineLayout> pipeline;
    if (dims_.pp > 1) {
      pipeline = pipeline_layout_from(in.options, pieces.num_units());
      stage_ = mesh.position(kAxisPipeline, in.rank);
      pp_ = {"pp", mesh.group(kAxisPipeline, in.rank)};
      const workloads::StageCut cut = pipeline->cut(stage_);
      layout_ = std::make_unique<workloads::ParamLayout>(workloads::stage_layout(pieces, cut));
      embedding_ = shared_stage_group(pieces, cut, mesh, in.rank);
      boundary_ = in.model->boundary_elements(in.train.micro_batch_size, dims_.tp, in.options.sequence_parallel,
                                              dims_.cp);
      adt_ = workloads::activation_dtype(in.train.precision);
    } else {
      layout_ = std::make_unique<workloads::ParamLayout>(pieces);
    }
    PlanInputs mine = in;
    mine.layout = layout_.get();
    inner_ = in.options.distributed_optimizer ? plan_zero_engine(mine, 1, false, "nd") : plan_ddp_engine(mine, "nd");
    state_bytes = inner_->state_bytes;
    micro_batches_per_rank = inner_->micro_batches_per_rank;
    driver_group = inner_->driver_group;
    verdict_group = inner_->verdict_group;
    if (pipeline) {
      actions = pipeline_schedule(in.options.schedule, *pipeline, stage_, static_cast<int>(micro_batches_per_rank));
      chunks_per_stage = pipeline->v;
    }
    wire_ = grad_wire_dtype(in.train);
    run_ = model_run(in, dims_);
    spec_ = in.model;
  }

  void unit(const Action& a, int u, int micro_batches, CollectiveLedger& out) override {
    // The model's own collectives run inside the unit, before the engine's reduction after it (none at tp = 1).
    const std::vector<workloads::TensorParallelCall> calls =
        dims_.tp > 1 ? spec_->tensor_parallel_calls(u, a.kind == Action::Kind::backward, run_)
                     : std::vector<workloads::TensorParallelCall>{};
    for (const workloads::TensorParallelCall& c : calls) {
      const std::string when = "per micro-batch (" + c.what + ")";
      switch (c.op) {
        case coll::CollOp::all_gather: out.all_gather(tp_, c.elements, c.dtype, c.times, when); break;
        case coll::CollOp::reduce_scatter: out.reduce_scatter(tp_, c.elements, c.dtype, c.times, when); break;
        case coll::CollOp::all_reduce: out.all_reduce(tp_, c.elements, c.dtype, c.times, when); break;
        default: HZP_THROW(PreconditionError, "nd plan: the model declared a collective the plan cannot count");
      }
    }
    cp_->unit(a, u, out);
    inner_->unit(a, u, micro_batches, out);
    if (dims_.pp > 1) boundary(a, u, out);
  }
  void step_end(CollectiveLedger& out) const override {
    if (dims_.pp > 1) {
      for (int u : shared_units(*layout_))
        out.all_reduce(embedding_, layout_->unit_numel(u), wire_, 1, "per step (tied table, its two stages)");
      StepDriver::plan_pipeline_collectives(pp_, micro_batches_per_rank, out);
    }
    cp_->step_end(micro_batches_per_rank, out);
    inner_->step_end(out);
  }

 private:
  // The pipeline's messages at the edges of an action (PipelineStage::run): before its first unit's forward
  // the input arrives from the previous chunk's stage; after its last unit's forward the output leaves for the
  // next; backward the other way round.
  void boundary(const Action& a, int u, CollectiveLedger& out) const {
    const int units = layout_->num_units();
    const bool fwd = a.kind == Action::Kind::forward;
    const int prev = (stage_ + dims_.pp - 1) % dims_.pp, next = (stage_ + 1) % dims_.pp;
    if (fwd && u == a.first_unit && a.first_unit > 0) out.recv(pp_, prev, boundary_, adt_, 1, "per micro-batch (activation in)");
    if (fwd && u == a.end_unit - 1 && a.end_unit < units) out.send(pp_, next, boundary_, adt_, 1, "per micro-batch (activation out)");
    if (!fwd && u == a.end_unit - 1 && a.end_unit < units) out.recv(pp_, next, boundary_, adt_, 1, "per micro-batch (gradient in)");
    if (!fwd && u == a.first_unit && a.first_unit > 0) out.send(pp_, prev, boundary_, adt_, 1, "per micro-batch (gradient out)");
  }

  // SharedStageGrads' group: the ranks at this rank's place in the other axes on the stages holding a shared unit.
  // A stage is in it when its layout holds shared units, by the engines' own rule (shared_units).
  static PlanGroup shared_stage_group(const workloads::ParamLayout& whole, const workloads::StageCut& cut,
                                      const coll::RankMesh& mesh, int rank) {
    const std::vector<int> stages = mesh.group(kAxisPipeline, rank);
    PlanGroup g{"embedding", {}};
    for (std::size_t s = 0; s < stages.size(); ++s)
      if (!shared_units(workloads::stage_layout(whole, {cut.stage_of_unit, static_cast<int>(s)})).empty())
        g.members.push_back(stages[s]);
    return g;
  }

  ParallelDims dims_;
  PlanGroup tp_, pp_, embedding_;
  std::unique_ptr<ContextParallelPlan> cp_;
  int stage_ = 0;
  std::int64_t boundary_ = 0;
  DType adt_ = DType::f32, wire_ = DType::f32;
  std::unique_ptr<workloads::ParamLayout> layout_;
  std::unique_ptr<EnginePlan> inner_;
  workloads::TensorParallelRun run_;
  const workloads::ModelSpec* spec_ = nullptr;
};

}  // namespace

std::unique_ptr<EnginePlan> plan_nd_engine(const PlanInputs& in) { return std::make_unique<NdPlan>(in); }

}  // namespace hzp::schedulers
