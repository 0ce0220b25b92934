// nd's declaration for the plan (plan/engine_plans.hpp): the data-parallel engine's (ddp's, or zero1's as the
// distributed optimizer) over the rank's tensor-parallel pieces, and around each unit the collectives the model
// itself issues over the tensor-parallel group, as the model declares them (ModelSpec::tensor_parallel_calls).
#include "hzp/core/error.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {
namespace {

class NdPlan final : public EnginePlan {
 public:
  explicit NdPlan(const PlanInputs& in) : dims_(nd_parallel_dims(in.options, in.world_size)) {
    if (in.model == nullptr && dims_.tp > 1)
      HZP_THROW(ConfigError, "the plan of scheduler nd at scheduler.tp = ", dims_.tp, " needs the model (its "
                "tensor-parallel pieces and collectives), not only its layout");
    const coll::RankMesh mesh = dims_.mesh(plan_topology(in));  // refuses tp across nodes unless allowed
    tp_ = {"tp", mesh.group(kAxisTensor, in.rank)};
    const int tp_rank = mesh.position(kAxisTensor, in.rank);
    // tp = 1: the whole layout, and the model issues no collective of its own.
    layout_ = std::make_unique<workloads::ParamLayout>(in.model ? in.model->tensor_parallel_layout(dims_.tp, tp_rank)
                                                                : *in.layout);
    PlanInputs mine = in;
    mine.layout = layout_.get();
    inner_ = in.options.distributed_optimizer ? plan_zero_engine(mine, 1, false, "nd") : plan_ddp_engine(mine, "nd");
    state_bytes = inner_->state_bytes;
    micro_batches_per_rank = inner_->micro_batches_per_rank;
    driver_group = inner_->driver_group;
    verdict_group = inner_->verdict_group;
    run_.tp = dims_.tp;
    run_.sequence_parallel = in.options.sequence_parallel;
    run_.recompute = in.train.recompute;
    run_.micro_batch_size = in.train.micro_batch_size;
    run_.precision = in.train.precision;
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
    inner_->unit(a, u, micro_batches, out);
  }
  void step_end(CollectiveLedger& out) const override { inner_->step_end(out); }

 private:
  ParallelDims dims_;
  PlanGroup tp_;
  std::unique_ptr<workloads::ParamLayout> layout_;
  std::unique_ptr<EnginePlan> inner_;
  workloads::TensorParallelRun run_;
  const workloads::ModelSpec* spec_ = nullptr;
};

}  // namespace

std::unique_ptr<EnginePlan> plan_nd_engine(const PlanInputs& in) { return std::make_unique<NdPlan>(in); }

}  // namespace hzp::schedulers
