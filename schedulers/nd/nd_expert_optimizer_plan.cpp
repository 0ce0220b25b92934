// The expert optimizer's declaration for the plan (plan/engine_plans.hpp), mirroring nd_expert_optimizer.cpp: no
// collective per unit (the gradients accumulate locally); at the step's end a reduce-scatter per unit of its dense
// elements over the data × context group ("shard") and of its expert pieces over the expert-data group ("edp"), the
// norm, and the same two all-gathers of the updated slices. The tp shares' sum before them is nd's (nd_plan.cpp).
#include "hzp/schedulers/common/expert_shard_layout.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {
namespace {

int position(const std::vector<int>& members, int rank) {
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank) return static_cast<int>(i);
  HZP_THROW(PreconditionError, "expert optimizer plan: rank ", rank, " is not in its own group");
}

class ExpertOptimizerPlan final : public EnginePlan {
 public:
  explicit ExpertOptimizerPlan(const PlanInputs& in)
      : dims_(scheduler_parallel_dims("nd", in.options, in.world_size)),
        pdt_(workloads::param_dtype(in.train.precision)) {
    check_expert_optimizer(in.train, dims_);
    check_plan_batches("nd", in, 0, dims_.dp());
    const std::shared_ptr<const coll::RankMesh> shared_mesh = plan_mesh(in, dims_);  // the world's (plan_world.hpp)
    const coll::RankMesh& mesh = *shared_mesh;
    const std::string_view shard_axes[] = {kAxisShard, kAxisContext};
    shard_ = {"shard", plan_mesh_group(in, mesh, shard_axes)};
    edp_ = {"edp", plan_group_holding(in, "expert data " + dims_.describe(), [&] { return dims_.expert_data_groups(mesh); })};
    norm_ = sharded_norm_group(in, dims_, mesh, shard_);
    driver_group = {"scalars", plan_mesh_group(in, mesh, data_parallel_axes())};
    micro_batches_per_rank = in.train.micro_batches() / dims_.dp();
    shards_ = std::make_unique<ExpertShardLayout>(*in.layout, static_cast<int>(shard_.members.size()),
                                                  static_cast<int>(edp_.members.size()));
    // The allocation tags' bytes: the flat parameters and the slice's padding (param), the flat fp32 gradient,
    // master (bf16-mixed), m and v of the slice.
    const auto n = static_cast<std::uint64_t>(in.layout->total_numel());
    const auto slice = static_cast<std::uint64_t>(shards_->slice_total());
    std::uint64_t real = 0;
    for (const ExpertShardLayout::SliceRun& r :
         shards_->slice_runs(position(shard_.members, in.rank), position(edp_.members, in.rank)))
      real += static_cast<std::uint64_t>(r.count);
    const bool mixed = workloads::has_separate_master(in.train.precision);
    state_bytes = {(n + slice - real) * dtype_size(pdt_), n * 4, mixed ? slice * 4 : 0, slice * 4, slice * 4};
  }

  void unit(const Action&, int, int, CollectiveLedger&) override {}

  void step_end(CollectiveLedger& out) const override {
    using Part = ExpertShardLayout::Part;
    for (const Part p : {Part::dense, Part::expert}) {
      const ShardLayout& s = shards_->shards(p);
      for (int u = 0; u < s.num_segments(); ++u)
        if (s.numel(u) > 0)
          out.reduce_scatter(group(p), s.padded_numel(u), DType::f32, 1,
                             p == Part::dense ? "per step (dense gradients)" : "per step (expert gradients)");
    }
    declare_norm(out, norm_, false);
    for (const Part p : {Part::dense, Part::expert}) {
      const ShardLayout& s = shards_->shards(p);
      for (int u = 0; u < s.num_segments(); ++u)
        if (s.numel(u) > 0)
          out.all_gather(group(p), s.slice_numel(u), pdt_, 1,
                         p == Part::dense ? "per step (updated dense parameters)" : "per step (updated experts)");
    }
  }

 private:
  const PlanGroup& group(ExpertShardLayout::Part p) const {
    return p == ExpertShardLayout::Part::dense ? shard_ : edp_;
  }
  ParallelDims dims_;
  DType pdt_;
  PlanGroup shard_, edp_, norm_;
  std::unique_ptr<ExpertShardLayout> shards_;
};

}  // namespace

std::unique_ptr<EnginePlan> plan_expert_optimizer_engine(const PlanInputs& in) {
  return std::make_unique<ExpertOptimizerPlan>(in);
}

}  // namespace hzp::schedulers
