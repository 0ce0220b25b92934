// nd's declaration for the plan (plan/engine_plans.hpp): the data-parallel engine's (ddp's, or zero1's as the
// distributed optimizer) over the rank's tensor-parallel pieces of its pipeline stage, and around each unit the
// collectives the model itself issues over the tensor-parallel group, as the model declares them
// (ModelSpec::tensor_parallel_calls). With pipeline stages the walk is the stage's schedule, each action receiving
// its input (or its output's gradient) from the neighbouring stage and sending its output (or its input's
// gradient) on, the tied table's two stages all-reduce its gradient, and the last stage's losses are summed over
// the pipeline group. With context parallelism each block's ring attention sends its K and V blocks (and in
// backward their gradients) around the cp group, as the model declares them (ModelSpec::context_parallel_messages),
// the gradients are summed over data × context, and each micro-batch's loss shares are summed over cp.
#include <algorithm>
#include <array>
#include <optional>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "plan/context_parallel_plan.hpp"
#include "plan/engine_plans.hpp"
#include "plan/pipeline_plan.hpp"

namespace hzp::schedulers {
namespace {

class NdPlan final : public EnginePlan {
 public:
  explicit NdPlan(const PlanInputs& in) : dims_(nd_parallel_dims(in.options, in.world_size)) {
    if (in.model == nullptr && (dims_.tp > 1 || dims_.pp > 1 || dims_.cp > 1))
      HZP_THROW(ConfigError, "the plan of scheduler nd at scheduler.tp = ", dims_.tp, ", scheduler.cp = ", dims_.cp,
                ", scheduler.pp = ", dims_.pp, " needs the model (its tensor-parallel pieces and collectives, its "
                "ring attention's messages, its activations between stages), not only its layout");
    // Refuses tp across nodes unless allowed; the world's mesh and groups when the caller describes many ranks.
    const std::shared_ptr<const coll::RankMesh> shared_mesh = plan_mesh(in, dims_);
    const coll::RankMesh& mesh = *shared_mesh;
    tp_ = {"tp", plan_mesh_group(in, mesh, kAxisTensor)};
    if (dims_.ep > 1) {
      if (in.model == nullptr)
        HZP_THROW(ConfigError, "the plan of scheduler nd at scheduler.ep = ", dims_.ep, " needs the model (its "
                  "expert pieces and all-to-alls), not only its layout");
      if (GroupMembers g = plan_group_holding(in, "expert " + dims_.describe(), [&] { return dims_.expert_groups(mesh); });
          !g.empty())
        ep_ = {"ep", g};
    }
    cp_ = std::make_unique<ContextParallelPlan>(in, dims_, mesh);
    const int tp_rank = mesh.position(kAxisTensor, in.rank);
    // tp = 1: the whole layout, and the model issues no collective of its own.
    // ep > 1: the rank's experts (ConfigError naming scheduler.ep when the model has none, or ep does not divide them).
    const int ep_rank = dims_.ep > 1 ? static_cast<int>(std::find(ep_.members.begin(), ep_.members.end(), in.rank) -
                                                        ep_.members.begin())
                                     : 0;
    const workloads::ParamLayout pieces = !in.model ? *in.layout
                                          : dims_.ep > 1 ? in.model->expert_parallel_layout(dims_.ep, ep_rank, dims_.tp, tp_rank)
                                                         : in.model->tensor_parallel_layout(dims_.tp, tp_rank);
    pipeline_ = std::make_unique<PipelinePlan>(in, dims_, mesh, pieces);
    PlanInputs mine = in;
    mine.layout = &pipeline_->layout();
    // The engine make_nd_scheduler picks: with expert pieces or tp row shares, the distributed optimizer is the
    // expert optimizer's (two shard layouts), which needs no dense sum over ep.
    const bool expert_optimizer =
        in.options.distributed_optimizer && (dims_.ep > 1 || (dims_.tp > 1 && !tp_share_ranges(pieces).empty()));
    inner_ = expert_optimizer                     ? plan_expert_optimizer_engine(mine)
             : in.options.distributed_optimizer ? plan_zero_engine(mine, 1, false, "nd")
                                                : plan_ddp_engine(mine, "nd");
    if (dims_.ep > 1 && !expert_optimizer) dense_ = dense_ranges(pipeline_->layout());
    if (dims_.tp > 1) shares_ = tp_share_ranges(pipeline_->layout());
    state_bytes = inner_->state_bytes;
    micro_batches_per_rank = inner_->micro_batches_per_rank;
    driver_group = inner_->driver_group;
    verdict_group = inner_->verdict_group;
    actions = pipeline_->actions(in.options, micro_batches_per_rank);
    chunks_per_stage = pipeline_->chunks_per_stage();
    model_tp = dims_.tp;
    model_cp = dims_.cp;
    wire_ = grad_wire_dtype(in.train);
    run_ = model_run(in, dims_);
    spec_ = in.model;
  }

  void unit(const Action& a, int u, int micro_batches, CollectiveLedger& out) override {
    // The model's own collectives run inside the unit, before the engine's reduction after it: between its matmuls,
    // on the compute thread (the simulator splits the unit's compute around them).
    out.stream(CommStream::compute, CommPlace::inside_unit);
    for (const ModelCall& c : model_calls(u, a.kind == Action::Kind::backward)) {
      if (c.group == &ep_) {
        out.all_to_all(ep_, c.op, c.elements, c.dtype, c.times, c.when.view());
        continue;
      }
      switch (c.op) {
        case coll::CollOp::all_gather: out.all_gather(*c.group, c.elements, c.dtype, c.times, c.when.view()); break;
        case coll::CollOp::reduce_scatter: out.reduce_scatter(*c.group, c.elements, c.dtype, c.times, c.when.view()); break;
        case coll::CollOp::all_reduce: out.all_reduce(*c.group, c.elements, c.dtype, c.times, c.when.view()); break;
        default: break;  // model_calls took only these from the model
      }
    }
    cp_->unit(a, u, out);
    out.stream(CommStream::compute);
    inner_->unit(a, u, micro_batches, out);
    pipeline_->unit(a, u, out);
  }
  void step_end(CollectiveLedger& out) const override {
    // The driver's order (StepDriver::step): the stages meet in the losses' sum and the cp shares are added
    // before the engine's finish_step (the tied table's all-reduce, then the engine's own).
    pipeline_->step_end(micro_batches_per_rank, out);
    cp_->step_end(micro_batches_per_rank, out);
    const workloads::ParamLayout& stage = pipeline_->layout();
    for (int u : shared_units(stage))
      out.all_reduce(pipeline_->embedding(), stage.unit_numel(u), wire_, 1, "per step (tied table, its two stages)");
    // Expert parallelism: after the buckets (over the ranks holding the same experts) the dense ranges over ep.
    const PlanGroup ep_grads{"ep_grads", ep_.members};
    for (const SliceRange& r : dense_)
      out.all_reduce(ep_grads, r.count, wire_, 1, "per step (dense gradients over ep, after the buckets)");
    // Tensor parallelism with experts: the router's and the routed experts' gradients, each tp rank's share of the
    // token rows, summed over tp (ExpertDataParallel::finish_sums).
    const PlanGroup tp_grads{"tp_grads", tp_.members};
    for (const SliceRange& r : shares_)
      out.all_reduce(tp_grads, r.count, wire_, 1, "per step (router and expert gradients: the tp ranks' row shares)");
    inner_->step_end(out);
  }

 private:
  // One of the model's own calls inside a unit, labelled: tensor-parallel on tp_, expert all-to-alls on ep_.
  struct ModelCall {
    const PlanGroup* group;
    coll::CollOp op;
    std::int64_t elements;
    DType dtype;
    std::int64_t times;
    InternedText when;
  };

  // Unit u's model calls, forward or backward: the same at every micro-batch, so asked of the model and labelled
  // once per unit (a step declares each unit's calls at every micro-batch; with cp, ~10,000 per rank at 16).
  const std::vector<ModelCall>& model_calls(int u, bool backward) {
    auto& memo = model_calls_[backward ? 1 : 0];
    if (memo.size() <= static_cast<std::size_t>(u)) memo.resize(static_cast<std::size_t>(u) + 1);
    std::optional<std::vector<ModelCall>>& calls = memo[static_cast<std::size_t>(u)];
    if (calls) return *calls;
    calls.emplace();
    // none at tp = 1
    if (dims_.tp > 1)
      for (const workloads::TensorParallelCall& c : spec_->tensor_parallel_calls(u, backward, run_)) {
        if (c.op != coll::CollOp::all_gather && c.op != coll::CollOp::reduce_scatter && c.op != coll::CollOp::all_reduce)
          HZP_THROW(PreconditionError, "nd plan: the model declared a collective the plan cannot count");
        calls->push_back({&tp_, c.op, c.elements, c.dtype, c.times, "per micro-batch (" + c.what + ")"});
      }
    // Expert parallelism: each MoE block's all-to-alls on the ep group (the all-to-all-v at the balanced expectation).
    if (dims_.ep > 1) {
      workloads::ExpertParallelRun run;
      run.ep = dims_.ep;
      run.tp = dims_.tp;
      run.cp = dims_.cp;
      run.recompute = run_.recompute;
      run.micro_batch_size = run_.micro_batch_size;
      run.precision = run_.precision;
      for (const workloads::ExpertParallelCall& c : spec_->expert_parallel_calls(u, backward, run))
        calls->push_back({&ep_, c.op, c.elements, c.dtype, c.times,
                          "per micro-batch (" + c.what + (c.expected ? "; balanced expectation: the routing sets it)" : ")")});
    }
    return *calls;
  }

  ParallelDims dims_;
  PlanGroup tp_, ep_;
  std::vector<SliceRange> dense_;   // ep > 1: the ranges summed over the ep group at the step's end
  std::vector<SliceRange> shares_;  // tp > 1: the tensor-parallel shares summed over the tp group at the step's end
  std::unique_ptr<ContextParallelPlan> cp_;
  std::unique_ptr<PipelinePlan> pipeline_;
  DType wire_ = DType::f32;
  std::unique_ptr<EnginePlan> inner_;
  workloads::TensorParallelRun run_;
  const workloads::ModelSpec* spec_ = nullptr;
  std::array<std::vector<std::optional<std::vector<ModelCall>>>, 2> model_calls_;  // [backward][unit]
};

}  // namespace

std::unique_ptr<EnginePlan> plan_nd_engine(const PlanInputs& in) { return std::make_unique<NdPlan>(in); }

}  // namespace hzp::schedulers
