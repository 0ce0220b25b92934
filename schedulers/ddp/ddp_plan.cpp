// ddp's declaration for the plan (plan/engine_plans.hpp): full replicas over the mesh's data-parallel group,
// and each gradient bucket all-reduced during the last micro-batch's backward, at the unit after which every
// block in it is final (what BucketedAllReduce::on_backward_done launches). As nd's engine (tensor parallelism),
// the layout is the rank's pieces, and the norm's sum of squares is all-reduced over the tensor-parallel group.
#include <algorithm>

#include "hzp/schedulers/common/bucketed_all_reduce.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {
namespace {

class DdpPlan final : public EnginePlan {
 public:
  DdpPlan(const PlanInputs& in, std::string_view name)
      : wire_(grad_wire_dtype(in.train)), deterministic_(in.train.deterministic), overlap_(in.options.overlap) {
    const ParallelDims dims = scheduler_parallel_dims(name, in.options, in.world_size);
    check_plan_batches(name, in, 0, dims.dp());
    const workloads::ParamLayout& layout = *in.layout;
    // The mesh and groups are the world's when the caller describes many ranks (plan_world.hpp).
    const std::shared_ptr<const coll::RankMesh> shared_mesh = plan_mesh(in, dims);
    const coll::RankMesh& mesh = *shared_mesh;
    // Gradients are summed over data × context (each context-parallel rank holds its tokens' share); the loss
    // over data parallelism (the driver sums the context shares itself).
    dp_ = {"dp", plan_mesh_group(in, mesh, data_context_axes())};
    driver_group = {"scalars", plan_mesh_group(in, mesh, data_parallel_axes())};
    if (dims.pp > 1) {
      const std::string_view distinct[] = {kAxisPipeline, kAxisTensor};
      tp_ = {"distinct", plan_mesh_group(in, mesh, distinct)};
    } else if (dims.tp > 1) {
      tp_ = {"tp", plan_mesh_group(in, mesh, kAxisTensor)};
    }
    // Expert parallelism (nd; or an MoE model's tensor-parallel row shares, ExpertDataParallel::make): buckets over
    // the ranks holding the same experts, the norm over ep × tp × the stages.
    if (dims.ep > 1 || (dims.tp > 1 && !tp_share_ranges(layout).empty())) {
      const std::string d = dims.describe();
      if (GroupMembers g = plan_group_holding(in, "expert data " + d, [&] { return dims.expert_data_groups(mesh); });
          !g.empty())
        dp_ = {"dp", g};
      if (GroupMembers g = plan_group_holding(in, "expert distinct " + d, [&] { return dims.expert_distinct_groups(mesh); });
          !g.empty())
        tp_ = {"distinct", g};
    }
    if (verdict_over_world(dims) && in.train.deterministic) verdict_group = {"verdict", plan_world_group(in)};
    const auto n = static_cast<std::uint64_t>(layout.total_numel());
    const bool mixed = workloads::has_separate_master(in.train.precision);
    micro_batches_per_rank = in.train.micro_batches() / dims.dp();
    state_bytes = {n * dtype_size(workloads::param_dtype(in.train.precision)), n * dtype_size(wire_),
                   mixed ? n * 4 : 0, n * 4, n * 4};
    const auto bucket_bytes = std::max<std::size_t>(static_cast<std::size_t>(in.options.bucket_mb * 1024.0 * 1024.0), 1);
    for (const BucketedAllReduce::Bucket& k : BucketedAllReduce::make_buckets(layout, bucket_bytes, dtype_size(wire_))) {
      // Complete when its last block becomes final: backward runs downwards, so at the smallest last writer.
      int at = layout.num_units();
      for (int b = k.first_unit; b <= k.last_unit; ++b)
        if (layout.unit_numel(b) > 0) at = std::min(at, layout.last_grad_writer(b));  // a stage's absent units: none
      buckets_.push_back({at, k.numel});
    }
  }

  void unit(const Action& a, int u, int micro_batches, CollectiveLedger& out) override {
    if (a.kind != Action::Kind::backward || a.micro_batch != micro_batches - 1) return;
    // scheduler.overlap: started non-blocking and waited at the end of backward; otherwise waited right away.
    out.stream(overlap_ ? CommStream::gradients : CommStream::compute, CommPlace::after_unit);
    for (const auto& [at, numel] : buckets_)
      if (at == u) out.all_reduce(dp_, numel, wire_, 1, "per step (buckets, last micro-batch)");
  }
  void step_end(CollectiveLedger& out) const override {
    // Replicas hold the whole model: only tensor-parallel pieces and pipeline stages make the norm a sum over ranks
    // (distinct_norm.hpp).
    declare_norm(out, tp_, deterministic_);
  }

 private:
  DType wire_;
  bool deterministic_, overlap_;
  PlanGroup dp_, tp_;
  std::vector<std::pair<int, std::int64_t>> buckets_;  // (unit after whose backward it launches, elements)
};

}  // namespace

std::unique_ptr<EnginePlan> plan_ddp_engine(const PlanInputs& in, std::string_view name) {
  return std::make_unique<DdpPlan>(in, name);
}

}  // namespace hzp::schedulers
