// zero1/2/3 and hsdp's declaration for the plan (plan/engine_plans.hpp), mirroring ZeroScheduler: shards of
// Z ranks (the mesh's dp_shard groups: the world, or scheduler.group_size for hsdp) over the per-unit shard
// layout; stage 3 gathers a block on first use and holds it to its last (FirstUseGathers); stages 2-3
// reduce-scatter a block's gradient as soon as it is final in every micro-batch, stage 1 once per step; hsdp
// all-reduces the gradient shards over its replicas; stages 1-2 gather the updated parameters. As nd's
// distributed optimizer (stage 1 with tensor parallelism) the layout is the rank's pieces and the norm is summed
// over every rank holding a distinct part (the shards × tp: group "distinct").
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/step/first_use_gathers.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {
namespace {

// The scheduler's own checks, then its degrees (the registry's: Z is their dp_shard).
ParallelDims checked_dims(const PlanInputs& in, std::string_view name, int group) {
  const ParallelDims dims = scheduler_parallel_dims(name, in.options, in.world_size);
  check_plan_batches(name, in, group, dims.dp());
  return dims;
}

class ZeroPlan final : public EnginePlan {
 public:
  ZeroPlan(const PlanInputs& in, int stage, bool hybrid, std::string_view name)
      : layout_(*in.layout),
        stage_(stage),
        dims_(checked_dims(in, name, hybrid ? in.options.group_size : 0)),
        shards_(ShardLayout::per_unit(*in.layout, dims_.dp_shard * dims_.cp)),
        pdt_(workloads::param_dtype(in.train.precision)),
        wire_(grad_wire_dtype(in.train)),
        deterministic_(in.train.deterministic) {
    // The mesh and groups are the world's when the caller describes many ranks (plan_world.hpp).
    const std::shared_ptr<const coll::RankMesh> shared_mesh = plan_mesh(in, dims_);
    const coll::RankMesh& mesh = *shared_mesh;
    const std::string_view shard_axes[] = {kAxisShard, kAxisContext};  // cp ranks are data-parallel for the weights
    shard_ = {"shard", plan_mesh_group(in, mesh, shard_axes)};
    norm_ = sharded_norm_group(in, dims_, mesh, shard_);
    if (verdict_over_world(dims_) && in.train.deterministic) verdict_group = {"verdict", plan_world_group(in)};
    if (hybrid) replica_ = {"replica", plan_mesh_group(in, mesh, kAxisReplicate)};
    driver_group = {"scalars", plan_mesh_group(in, mesh, data_parallel_axes())};
    const auto full = static_cast<std::uint64_t>(shards_.padded_total()), slice = static_cast<std::uint64_t>(shards_.slice_total());
    const bool mixed = workloads::has_separate_master(in.train.precision);
    micro_batches_per_rank = in.train.micro_batches() / dims_.dp();
    state_bytes = {(stage < 3 ? full : slice) * dtype_size(pdt_), (stage == 1 ? full : slice) * dtype_size(wire_),
                   mixed ? slice * 4 : 0, slice * 4, slice * 4};
  }

  void unit(const Action& a, int u, int, CollectiveLedger& out) override {
    const bool fwd = a.kind == Action::Kind::forward;
    if (stage_ == 3)
      for (int b : gathers_.call(a, u))
        out.all_gather(shard_, shards_.slice_numel(b), pdt_, 1, "per micro-batch (forward + backward)");
    out.stream(CommStream::compute, CommPlace::after_unit);  // blocking, once the backward made them final
    if (stage_ >= 2 && !fwd)
      for (int b : layout_.grads_final_after(u))
        out.reduce_scatter(shard_, shards_.padded_numel(b), wire_, 1, "per micro-batch (gradients)");
  }

  void step_end(CollectiveLedger& out) const override {
    const int units = layout_.num_units();
    if (stage_ == 1)
      for (int u = 0; u < units; ++u)
        if (shards_.numel(u) > 0) out.reduce_scatter(shard_, shards_.padded_numel(u), wire_, 1, "per step (gradients)");
    if (replica_.members.size() > 1) out.all_reduce(replica_, shards_.slice_total(), wire_, 1, "per step (gradient shards)");
    declare_norm(out, norm_, deterministic_);
    if (stage_ < 3)
      for (int u = 0; u < units; ++u)
        if (shards_.numel(u) > 0) out.all_gather(shard_, shards_.slice_numel(u), pdt_, 1, "per step (updated parameters)");
  }

 private:
  const workloads::ParamLayout& layout_;
  int stage_;
  ParallelDims dims_;
  ShardLayout shards_;
  DType pdt_, wire_;
  bool deterministic_;
  PlanGroup shard_, replica_, norm_;
  FirstUseGathers gathers_{layout_};
};

}  // namespace

PlanGroup sharded_norm_group(const PlanInputs& in, const ParallelDims& dims, const coll::RankMesh& mesh,
                             const PlanGroup& shard) {
  if (dims.pp > 1) {
    const std::string_view distinct[] = {kAxisPipeline, kAxisShard, kAxisContext, kAxisTensor};
    return {"distinct", plan_mesh_group(in, mesh, distinct)};
  }
  if (dims.tp > 1) {
    const std::string_view distinct[] = {kAxisShard, kAxisContext, kAxisTensor};
    return {"distinct", plan_mesh_group(in, mesh, distinct)};
  }
  return shard;
}

std::unique_ptr<EnginePlan> plan_zero_engine(const PlanInputs& in, int stage, bool hybrid, std::string_view name) {
  return std::make_unique<ZeroPlan>(in, stage, hybrid, name);
}

}  // namespace hzp::schedulers
