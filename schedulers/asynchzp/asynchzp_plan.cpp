// asynchzp's declaration for the plan (plan/engine_plans.hpp), mirroring AsyncHzp: each segment of a block
// is all-gathered over z3 on the block's first use (StageReuse: held across neighbouring actions of a pipeline
// stage with pp_reuse; the order its background thread follows; prefetching moves a call earlier, not its count)
// and reduce-scattered over z2 once the block's gradient is final, every micro-batch (once per run of consecutive
// backwards with rs_merge); the peak bytes of gathered blocks held are counted as the walk goes; the step end
// reduces the gradient shards across replicas (all-reduce, or reduce-scatter then all-gather of the optimizer
// slices), takes the norm over z1 and refreshes the parameter shards. With context parallelism (scheduler.cp) the
// z-groups run over the dp · cp ranks, and the model's ring attention and the loss shares' sum over cp join
// (ContextParallelPlan). With scheduler.tied_split the tied table's last reduce-scatter and exchange follow the
// head's backward and its last micro-batch's rows are sent to their owners or all-gathered after the embedding's
// (tied_rows.hpp). The ring pool a run would build is
// checked here too, so a pool too small is refused before anything is created.
#include <algorithm>
#include <optional>

#include "asynchzp/asynchzp_segments.hpp"
#include "asynchzp/ring_sizing.hpp"
#include "asynchzp/tied_rows.hpp"
#include "hzp/schedulers/common/nested_groups.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/schedulers/step/stage_reuse.hpp"
#include "plan/context_parallel_plan.hpp"
#include "plan/engine_plans.hpp"
#include "plan/pipeline_plan.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::schedulers {
namespace {

class AsyncHzpPlan final : public EnginePlan {
 public:
  explicit AsyncHzpPlan(const PlanInputs& in)
      : dims_(asynchzp_parallel_dims(in.options, in.world_size)),
        pipeline_(std::make_unique<PipelinePlan>(in, dims_, *plan_mesh(in, dims_), *in.layout)),
        layout_(pipeline_->layout()),
        g_((check_plan_batches("asynchzp", in, 0, dims_.dp()), nested_groups_from(in.options, in.world_size))),
        rs_end_(in.options.step_end == SchedulerOptions::StepEnd::reduce_scatter),
        async_(in.options.async),
        seg_(layout_, in.options.launch, g_, rs_end_ ? g_.world() : g_.z1()),
        pdt_(workloads::param_dtype(in.train.precision)),
        wire_(grad_wire_dtype(in.train)),
        deterministic_(in.train.deterministic) {
    if (in.options.async && in.options.pool_fallback == SchedulerOptions::PoolFallback::error)
      check_rings_fit(size_rings(layout_, seg_, pdt_, in.options.prefetch, in.options.pool_mb), layout_, seg_, pdt_,
                      in.options.pool_mb, in.options.prefetch);
    const bool mixed = workloads::has_separate_master(in.train.precision);
    const auto s3 = static_cast<std::uint64_t>(seg_.l3.slice_total()), s2 = static_cast<std::uint64_t>(seg_.l2.slice_total()),
               s1 = static_cast<std::uint64_t>(seg_.l1.slice_total());
    micro_batches_per_rank = in.train.micro_batches() / dims_.dp();
    state_bytes = {s3 * dtype_size(pdt_), s2 * dtype_size(wire_), mixed ? s1 * 4 : 0, s1 * 4, s1 * 4};
    // The z-groups are laid over one stage's ranks (pp is the mesh's outermost axis): position p of the stage is
    // world rank base + p.
    const int r = in.rank, per_stage = g_.world(), base = r - r % per_stage;
    // Each group is made once per world when the caller describes many ranks (PlanWorld): keyed by its kind, its
    // colour and the stage's first rank, all that tells two of them apart in one configuration.
    auto group = [&](const char* name, auto slot_of) {
      const std::string key =
          std::string("asynchzp ") + name + " " + std::to_string(slot_of(r % per_stage).color) + " " + std::to_string(base);
      return PlanGroup{name, plan_group(in, key, [&] {
                         std::vector<int> m = g_.members(r % per_stage, slot_of);
                         for (int& q : m) q += base;
                         return m;
                       })};
    };
    z3_ = group("z3", [&](int q) { return g_.z3_group(q); });
    z2_ = group("z2", [&](int q) { return g_.z2_group(q); });
    z1_ = group("z1", [&](int q) { return g_.z1_group(q); });
    replica_ = group("replica", [&](int q) { return g_.replica_group(q); });
    opt_replica_ = group("opt_replica", [&](int q) { return g_.opt_replica_group(q); });
    refresh_ = group("refresh", [&](int q) { return g_.refresh_group(q); });
    if (dims_.pp > 1) {
      // The norm over z1's place on every stage, stage by stage (the scheduler's split key).
      const std::string key = "asynchzp z1 stages " + std::to_string(g_.z1_group(r % per_stage).color);
      z1_.members = plan_group(in, key, [&] {
        std::vector<int> m;
        for (int st = 0; st < dims_.pp; ++st)
          for (int q : z1_.members) m.push_back(q - base + st * per_stage);
        return m;
      });
    }
    const std::shared_ptr<const coll::RankMesh> shared_mesh = plan_mesh(in, dims_);
    const coll::RankMesh& mesh = *shared_mesh;
    // The data-parallel group is the ranks agreeing with r on every other axis.
    const std::string dp_key = "asynchzp scalars " + std::to_string(mesh.position(kAxisPipeline, r)) + " " +
                               std::to_string(mesh.position(kAxisContext, r)) + " " +
                               std::to_string(mesh.position(kAxisTensor, r));
    driver_group = {"scalars", plan_group(in, dp_key, [&] { return data_parallel_ranks(mesh, r); })};
    // Every rank converts gradients in deterministic mode; with cp or pp the scalars' ranks are only some of them.
    if (verdict_over_world(dims_) && in.train.deterministic)
      verdict_group = {"verdict", plan_world_group(in)};
    cp_ = std::make_unique<ContextParallelPlan>(in, dims_, mesh);
    actions = pipeline_->actions(in.options, micro_batches_per_rank);
    chunks_per_stage = pipeline_->chunks_per_stage();
    prefetch = async_ ? in.options.prefetch : 0;
    // Async without pipeline stages, the exchange and the refresh are declared where the threads run them (one
    // stage's schedule is a plain sequence there); the totals are the same either way.
    spread_ = async_ && dims_.pp == 1 && !rs_end_;
    refreshed_.assign(static_cast<std::size_t>(layout_.num_units()), false);
    model_tp = dims_.tp;
    model_cp = dims_.cp;
    if (in.options.tied_split != TiedSplit::off) {
      if (in.model == nullptr)
        HZP_THROW(ConfigError, "the plan with scheduler.tied_split = ", tied_split_name(in.options.tied_split),
                  " needs the model (its tokens per micro-batch), not only its layout");
      tied_mode_ = in.options.tied_split;
      tied_ = tied_split_table(layout_, dims_, /*on_gpu=*/false, tied_mode_);
      // A rank's tokens of a micro-batch: its share of every sequence under cp (ContextShard::local_len).
      tied_slots_ = in.train.micro_batch_size * (in.model->seq_len() / dims_.cp);
      // The world, which without stages (refused above) is the data × context group the rows are summed over.
      tied_rows_ = {"tied_rows", plan_world_group(in)};
    }
    reuse_ = std::make_unique<StageReuse>(layout_, actions, dims_.pp > 1 && in.options.pp_reuse,
                                          dims_.pp > 1 && in.options.rs_merge);
  }

  void unit(const Action& a, int u, int, CollectiveLedger& out) override {
    pipeline_->unit(a, u, out);
    cp_->unit(a, u, out);  // the model's ring attention runs inside the unit, after its parameters arrived
    const bool fwd = a.kind == Action::Kind::forward;
    const FirstUseGathers::Call c = reuse_->call(a, u);
    const auto block_bytes = [&](int b) { return static_cast<std::uint64_t>(seg_.unit_block_numel(b)) * dtype_size(pdt_); };
    out.stream(async_ ? CommStream::params : CommStream::compute);  // the parameter thread, ahead of use
    for (int b : c.gather) {  // the order AsyncComm's gather_order issues them in
      if (spread_ && !refreshed_[static_cast<std::size_t>(b)]) {  // the unit's refresh, which its first gather waits for
        refreshed_[static_cast<std::size_t>(b)] = true;
        out.stream(CommStream::gradients, CommPlace::step_start);  // queued on the gradient thread at the step's start
        declare_refresh(out, seg_.first(b), seg_.end(b));
        out.stream(CommStream::params);
      }
      for (int s = seg_.first(b); s < seg_.end(b); ++s)
        out.all_gather(z3_, seg_.l3.slice_numel(s), pdt_, 1, "per micro-batch (forward + backward)");
      held_ += block_bytes(b);
    }
    gathered_peak_bytes = std::max(gathered_peak_bytes, held_);
    for (int b : c.release) held_ -= block_bytes(b);
    out.stream(async_ ? CommStream::gradients : CommStream::compute, CommPlace::after_unit);  // the gradient thread
    const bool split = tied_ && a.micro_batch == micro_batches_per_rank - 1;
    std::vector<int> finals = fwd ? std::vector<int>{} : layout_.grads_final_after(u);
    if (split) {  // the table's dense part is final after the head; the embedding's backward leaves rows
      std::erase(finals, tied_->unit);
      if (u == tied_->head && !fwd) finals.push_back(tied_->unit);
    }
    if (!fwd) {
      for (int b : finals) {
        if (reuse_->grad_held_after(a, b)) continue;  // rs_merge: summed into the next backward's block
        for (int s = seg_.first(b); s < seg_.end(b); ++s)
          if (seg_.l2.slice_numel(s) > 0)
            out.reduce_scatter(z2_, seg_.l2.padded_numel(s), wire_, 1, "per micro-batch (gradients)");
        if (spread_ && a.micro_batch == micro_batches_per_rank - 1) declare_exchange(out, b);  // behind its last one
      }
      if (split && u == tied_->unit && spread_) {  // behind the table's exchange on the gradient thread
        out.stream(CommStream::gradients, CommPlace::after_unit);
        declare_tied_rows(out, tied_rows_, *tied_, tied_slots_, wire_, tied_mode_, g_.z1());
      }
    }
  }

  void step_end(CollectiveLedger& out) const override {
    pipeline_->step_end(micro_batches_per_rank, out);
    cp_->step_end(micro_batches_per_rank, out);
    // The tied table's gradient slice, summed over its two stages before the norm (SharedStageGrads).
    for (int u : shared_units(layout_)) {
      const std::int64_t n = seg_.l1.slice_offset(seg_.end(u)) - seg_.l1.slice_offset(seg_.first(u));
      out.all_reduce(pipeline_->embedding(), n, wire_, 1, "per step (tied table's gradient slice, its two stages)");
    }
    const int segments = seg_.l3.num_segments();
    declare_norm(out, z1_, deterministic_);
    // Async, the exchange runs on the gradient thread behind each unit's last reduce-scatter; the refresh is queued
    // there too, at the next step's start, and each unit's first gather waits for its refresh (docs/data-parallel.md;
    // CommPlace::step_start).
    out.stream(async_ ? CommStream::gradients : CommStream::compute);
    if (!rs_end_) {
      if (replica_.members.size() > 1 && !async_ && seg_.l2.slice_total() > 0)
        out.all_reduce(replica_, seg_.l2.slice_total(), wire_, 1, "per step (gradient shards)");
      // Async, each unit's exchange is queued behind its last reduce-scatter (AsyncHzp::backward_done): one
      // all-reduce per unit of its segments' part of the gradient slice.
      if (async_ && !spread_)
        for (int u = 0; u < layout_.num_units(); ++u) declare_exchange(out, u);
    } else {
      for (int s = 0; s < segments; ++s) {
        if (replica_.members.size() > 1 && seg_.in_grad_slice.slice_numel(s) > 0)
          out.reduce_scatter(replica_, seg_.l2.slice_numel(s), wire_, 1, "per step (gradient shards)");
        if (opt_replica_.members.size() > 1 && seg_.l1.slice_numel(s) > 0)
          out.all_gather(opt_replica_, seg_.in_opt_slice.slice_numel(s), wire_, 1, "per step (optimizer-slice gradients)");
      }
    }
    if (tied_ && !spread_) declare_tied_rows(out, tied_rows_, *tied_, tied_slots_, wire_, tied_mode_, g_.z1());  // after the exchange
    if (async_)
      out.stream(CommStream::gradients, CommPlace::step_start);  // the first gather waits for them all (pp: no units)
    else
      out.stream(CommStream::compute);
    if (!spread_) declare_refresh(out, 0, segments);
  }

 private:
  // Unit u's part of the gradient slice summed across replicas: async, queued behind the unit's last reduce-scatter.
  void declare_exchange(CollectiveLedger& out, int u) const {
    const std::int64_t n = seg_.l2.slice_offset(seg_.end(u)) - seg_.l2.slice_offset(seg_.first(u));
    if (replica_.members.size() > 1 && n > 0) {
      out.stream(CommStream::gradients, CommPlace::after_unit);
      out.all_reduce(replica_, n, wire_, 1, "per step (gradient shards, one unit each)");
    }
  }
  // The updated parameter shards of segments [first, end) gathered back into the z3 shards.
  void declare_refresh(CollectiveLedger& out, int first, int end) const {
    if (refresh_.members.size() > 1)
      for (int s = first; s < end; ++s)
        if (seg_.l3.slice_numel(s) > 0)
          out.all_gather(refresh_, seg_.in_shard.slice_numel(s), pdt_, 1, "per step (updated parameters)");
  }

  ParallelDims dims_;
  std::unique_ptr<PipelinePlan> pipeline_;
  const workloads::ParamLayout& layout_;  // the stage's (pipeline_'s)
  NestedGroups g_;
  bool rs_end_, async_;
  Segments seg_;
  DType pdt_, wire_;
  bool deterministic_;
  PlanGroup z3_, z2_, z1_, replica_, opt_replica_, refresh_;
  std::unique_ptr<StageReuse> reuse_;  // the engine's gathers and reduce-scatters over this stage's actions
  std::uint64_t held_ = 0;             // gathered blocks' bytes held during the walk
  bool spread_ = false;                // exchange and refresh declared inside the walk (async, one stage)
  std::vector<bool> refreshed_;        // blocks whose refresh the walk has declared
  std::unique_ptr<ContextParallelPlan> cp_;
  std::optional<TiedTable> tied_;  // scheduler.tied_split
  TiedSplit tied_mode_ = TiedSplit::off;
  std::int64_t tied_slots_ = 0;    // the rank's tokens of a micro-batch: the rows' slots
  PlanGroup tied_rows_;
};

}  // namespace

std::unique_ptr<EnginePlan> plan_asynchzp_engine(const PlanInputs& in) { return std::make_unique<AsyncHzpPlan>(in); }

}  // namespace hzp::schedulers
