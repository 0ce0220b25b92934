// nd's distributed optimizer for a model holding expert pieces (scheduler.ep > 1) or tensor-parallel gradient shares
// (an MoE model under tp > 1): Megatron-Core's layout (docs/nd-parallel.md "Expert parallelism"). Gradients
// accumulate locally in fp32 over the rank's micro-batches, as zero1's do; at the step's end the tp row shares of the
// routers and experts are summed over tp, then the dense elements are reduce-scattered over the data × context group
// and the expert pieces' over their expert-data group (ExpertShardLayout), AdamW runs on the two slices, and the
// updated slices are all-gathered back over the same groups. zero1's engine (zero_scheduler.cpp) keeps the one
// layout of the dense model; this one packs each part into its own padded buffer around the collectives (a
// transient copy of one part's gradient or parameters, tag comm; Megatron lays its buffers out that way from the
// start). fp32 and bf16-mixed, checkpointed in the whole model's order like every layout; deterministic mode is
// refused by name.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/common/checkpoint_state.hpp"
#include "hzp/schedulers/common/distinct_norm.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/common/expert_shard_layout.hpp"
#include "hzp/schedulers/common/gather_scatter.hpp"
#include "hzp/schedulers/common/model_runs.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/common/state_dump.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/step/parameter_engine.hpp"
#include "hzp/schedulers/step/step_driver.hpp"

namespace hzp::schedulers {
namespace {

using Part = ExpertShardLayout::Part;
constexpr Part kParts[] = {Part::dense, Part::expert};

class ExpertOptimizerScheduler final : public DataParallelScheduler, private ParameterEngine {
 public:
  explicit ExpertOptimizerScheduler(const SchedulerArgs& args);
  std::string_view name() const override { return "nd"; }
  StepStats step(const StepBatch& batch) override { return driver_->step(batch, *this); }
  ReplicaDigests replicated_state() const override;
  std::vector<float> gather_gradient() override { return gather_slices(slice(reduced_, DType::f32)); }
  std::vector<float> gather_master_params() override {
    return opt_->has_master() ? gather_slices(opt_->master()) : gather_working_params();
  }
  std::vector<float> gather_working_params() override;
  std::vector<float> gather_moment(bool second) override { return gather_slices(second ? opt_->v() : opt_->m()); }
  void visit_state(StateVisitor& visitor) override {
    visit_gathered_state(*this, model_->layout(), train_.precision, groups_->rank() == 0, tpx_->debug(), visitor,
                         expert_->debug());
  }
  void checkpoint(StateArchive& archive) override;

 private:
  TensorView flat(const Allocation& a, DType t) const { return view_at(a, t, 0, n_, alloc_->device()); }
  TensorView params() const { return flat(params_, pdt_); }
  TensorView grads() const { return flat(grads_, DType::f32); }
  TensorView slice(const Allocation& a, DType t) const { return view_at(a, t, 0, shards_->slice_total(), alloc_->device()); }
  GatherScatter& engine(Part p) const { return p == Part::dense ? *dense_gs_ : *expert_gs_; }
  // After construction and each update: every rank's slices all-gathered, part by part, into the flat parameters.
  void gather_params();
  // Every rank's fp32 slice (slice order) gathered uncounted into the rank's flat [N] model order.
  std::vector<float> gather_slices(ConstTensorView mine);

  void begin_attempt(std::int64_t, const std::vector<Action>&) override {}
  workloads::UnitParams unit_params(int u, const Action&) override {
    return workloads::unit_params_from_flat(model_->layout(), u, params());
  }
  void forward_done(int, const Action&) override {}
  workloads::UnitGrads unit_grads(int u, const Action& a) override {
    // Local accumulation over micro-batches, as a single rank would do; reduced once, at the step's end.
    return workloads::unit_grads_from_flat(model_->layout(), u, grads(), /*fresh=*/a.micro_batch == 0);
  }
  void backward_done(int, const Action&) override {}
  FixedPointGrads* fixed_point() noexcept override { return nullptr; }
  coll::Communicator& scalars() noexcept override { return *scalars_comm_; }
  StepFinish finish_step(std::int64_t step, double lr) override;

  const workloads::Workload* model_;
  workloads::TrainConfig train_;
  CachingAllocator* alloc_;
  StreamRef stream_ = StreamRef::host();
  std::unique_ptr<ProcessGroups> own_groups_;
  const ProcessGroups* groups_;
  DType pdt_;
  std::int64_t n_ = 0;
  std::unique_ptr<TensorParallelExtras> tpx_;
  std::unique_ptr<ExpertDataParallel> expert_;  // the expert-data group, the tp shares' sum, the dump's ep group
  // shard: data × context (dense slices); the expert slices run on expert_->expert_data() ("edp").
  std::unique_ptr<coll::Communicator> shard_comm_, scalars_comm_, distinct_comm_, dense_debug_, expert_debug_;
  std::unique_ptr<SharedStageGrads> shared_;
  std::unique_ptr<ExpertShardLayout> shards_;
  std::vector<ExpertShardLayout::SliceRun> mine_;  // this rank's slice, real elements
  std::unique_ptr<GatherScatter> dense_gs_, expert_gs_;
  std::unique_ptr<DistinctNorm> norm_;
  Allocation params_, grads_, reduced_, padding_;
  std::unique_ptr<ShardedOptimizer> opt_;
  std::unique_ptr<StepDriver> driver_;
};

ExpertOptimizerScheduler::ExpertOptimizerScheduler(const SchedulerArgs& args) {
  validate_data_parallel("nd", args, 0, scheduler_parallel_dims("nd", args.options, args.world->size()).dp());
  model_ = args.model;
  train_ = args.train;
  alloc_ = args.allocator;
  stream_ = args.stream;
  pdt_ = workloads::param_dtype(train_.precision);
  groups_ = &scheduler_groups("nd", args, own_groups_);
  check_expert_optimizer(train_, groups_->dims());
  check_tensor_parallel_model("nd", *groups_, *model_);
  check_context_parallel_model("nd", *groups_, *model_);
  const workloads::ParamLayout& layout = model_->layout();
  n_ = layout.total_numel();
  tpx_ = std::make_unique<TensorParallelExtras>(*groups_, false);
  expert_ = ExpertDataParallel::make(*groups_, layout);
  HZP_CHECK(expert_ != nullptr, "nd's expert optimizer: neither expert pieces nor tensor-parallel shares");
  // One fixed order on every rank: each split is collective over the world.
  shard_comm_ = groups_->split({kAxisShard, kAxisContext}, "shard");
  if (groups_->dims().pp > 1)
    distinct_comm_ = groups_->split({kAxisPipeline, kAxisShard, kAxisContext, kAxisTensor}, "distinct");
  else if (groups_->tensor() != nullptr)
    distinct_comm_ = groups_->split({kAxisShard, kAxisContext, kAxisTensor}, "distinct");
  scalars_comm_ = groups_->data_parallel().duplicate("scalars");
  dense_debug_ = shard_comm_->duplicate("debug", /*share_counters=*/false);
  expert_debug_ = expert_->expert_data().duplicate("edp_debug", /*share_counters=*/false);
  shared_ = std::make_unique<SharedStageGrads>(*groups_, layout);

  shards_ = std::make_unique<ExpertShardLayout>(layout, shard_comm_->size(), expert_->expert_data().size());
  mine_ = shards_->slice_runs(shard_comm_->rank(), expert_->expert_data().rank());
  dense_gs_ = std::make_unique<GatherScatter>(*shard_comm_, shards_->shards(Part::dense), *alloc_, stream_);
  expert_gs_ = std::make_unique<GatherScatter>(expert_->expert_data(), shards_->shards(Part::expert), *alloc_, stream_);

  // The norm: every element of a slice is unique over the data × context group (dense slices over it, expert
  // slices over their expert-data group, the ep ranks' experts distinct); over tp, pieces count everywhere and whole
  // tensors (experts included) on tp rank 0; a table held for another stage's unit counts where it runs.
  std::vector<SliceRange> counted;
  for (const ExpertShardLayout::SliceRun& r : mine_) {
    const workloads::Unit& unit = layout.unit(r.unit);
    const workloads::ParamTensor& t = unit.tensors[static_cast<std::size_t>(r.tensor)];
    const bool tp_piece = t.shard.sharded() && t.shard.group != "ep";
    if (!unit.runs || !(tp_piece || tpx_->rank() == 0)) continue;
    if (!counted.empty() && counted.back().offset + counted.back().count == r.local)
      counted.back().count += r.count;
    else
      counted.push_back({r.local, r.count});
  }
  norm_ = std::make_unique<DistinctNorm>(std::move(counted), distinct_comm_ ? distinct_comm_.get() : shard_comm_.get());

  params_ = zeroed_on(*alloc_, n_, pdt_, AllocationTag::param, stream_);
  grads_ = zeroed_on(*alloc_, n_, DType::f32, AllocationTag::grad, stream_);
  reduced_ = zeroed_on(*alloc_, shards_->slice_total(), DType::f32, AllocationTag::comm, stream_);
  // The optimizer's pieces: the slice's real elements are views of the flat parameters; its padding (zero, and
  // zero under AdamW) lives in a small buffer of its own.
  std::int64_t pad = shards_->slice_total();
  for (const ExpertShardLayout::SliceRun& r : mine_) pad -= r.count;
  padding_ = zeroed_on(*alloc_, pad, pdt_, AllocationTag::param, stream_);
  std::vector<TensorView> pieces;
  std::int64_t at = 0, pad_used = 0;
  auto pad_to = [&](std::int64_t end) {
    if (end > at) pieces.push_back(view_at(padding_, pdt_, pad_used, end - at, alloc_->device()));
    pad_used += end - at;
    at = end;
  };
  for (const ExpertShardLayout::SliceRun& r : mine_) {
    pad_to(r.local);
    pieces.push_back(view_at(params_, pdt_, r.flat, r.count, alloc_->device()));
    at += r.count;
  }
  pad_to(shards_->slice_total());
  const std::vector<ExpertShardLayout::SliceRun> runs = mine_;
  opt_ = std::make_unique<ShardedOptimizer>(
      train_, std::move(pieces), *alloc_,
      [this, runs](std::span<float> master) {
        // The counter-based initialiser indexes the rank's flat order: every slice starts from none's values.
        for (const ExpertShardLayout::SliceRun& r : runs)
          model_->init_params(r.flat, master.subspan(static_cast<std::size_t>(r.local), static_cast<std::size_t>(r.count)),
                              train_.seed);
      },
      stream_);
  gather_params();
  driver_ = std::make_unique<StepDriver>("nd", *model_, train_, *alloc_, groups_->data_parallel().rank(),
                                         groups_->data_parallel().size(),
                                         step_pipeline(args.options, *groups_, layout.num_units()), groups_->context(),
                                         stream_);
  driver_->set_unit_sleep(UnitSleep(args.options));
}

// This rank's slice as flat runs mapped to the whole model's order (model_runs.hpp). Every slice element is this
// rank's alone over data × context (dense slices over it, expert slices over the expert-data group, the ep ranks'
// experts distinct), so each rank writes its own: over tp, pieces everywhere and whole tensors (experts included) on
// tp rank 0; a table held for another stage's unit where it runs. On load every rank reads its runs, then the
// parameters are gathered from the restored slices as after construction.
void ExpertOptimizerScheduler::checkpoint(StateArchive& archive) {
  std::vector<StateArchive::Run> runs;
  for (const ExpertShardLayout::SliceRun& r : mine_) runs.push_back({r.flat, r.local, r.count});
  // In the model's order, as the archive packs and writes them (the slice holds the dense part first).
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.global < b.global; });
  const int tp_rank = tpx_->rank();
  const TensorWriter writes =
      archive.loading() ? TensorWriter([](const auto&, const auto&) { return true; })
                        : TensorWriter([tp_rank](const workloads::Unit& unit, const workloads::ParamTensor& t) {
                            const bool tp_piece = t.shard.sharded() && t.shard.group != "ep";
                            return unit.runs && (tp_piece || tp_rank == 0);
                          });
  opt_->checkpoint(archive, model_runs(model_->layout(), runs, writes), true);
  if (archive.loading()) {
    gather_params();
    driver_->resume_at(archive.next_step());
  }
  checkpoint_side_state(archive, *model_, nullptr, groups_->pipeline());
}

void ExpertOptimizerScheduler::gather_params() {
  for (const Part p : kParts) {
    const ShardLayout& s = shards_->shards(p);
    if (s.padded_total() == 0) continue;
    // This rank's slice of the part, packed from the flat parameters the optimizer wrote.
    const Allocation slice = zeroed_on(*alloc_, s.slice_total(), pdt_, AllocationTag::comm, stream_);
    const std::size_t esz = dtype_size(pdt_);
    for (const ExpertShardLayout::SliceRun& r : mine_)
      if (r.part == p)
        copy_bytes(slice.data_as<std::byte>() + (r.local - shards_->part_base(p)) * std::int64_t(esz), alloc_->device(),
                   params_.data_as<std::byte>() + r.flat * std::int64_t(esz), alloc_->device(),
                   static_cast<std::size_t>(r.count) * esz, stream_);
    const Allocation full = alloc_->allocate(static_cast<std::size_t>(s.padded_total()) * esz, AllocationTag::comm);
    for (int u = 0; u < s.num_segments(); ++u)
      if (s.numel(u) > 0)
        engine(p).gather_into(u, view_at(slice, pdt_, s.slice_offset(u), s.slice_numel(u), alloc_->device()),
                              view_at(full, pdt_, s.padded_offset(u), s.padded_numel(u), alloc_->device()));
    engine(p).complete();
    shards_->unpack(p, view_at(full, pdt_, 0, s.padded_total(), alloc_->device()), params(), stream_);
  }
}

StepFinish ExpertOptimizerScheduler::finish_step(std::int64_t step, double lr) {
  const workloads::ParamLayout& layout = model_->layout();
  // A pipeline's tied table: its two stages' contributions added first; then the tp ranks' row shares.
  shared_->all_reduce([&](int u) { return workloads::unit_block(layout, u, grads()); }, stream_);
  expert_->sum_tp_shares(grads());
  for (const Part p : kParts) {
    const ShardLayout& s = shards_->shards(p);
    if (s.padded_total() == 0) continue;
    const Allocation full = zeroed_on(*alloc_, s.padded_total(), DType::f32, AllocationTag::comm, stream_);
    const TensorView fv = view_at(full, DType::f32, 0, s.padded_total(), alloc_->device());
    shards_->pack(p, grads(), fv, stream_);
    for (int u = 0; u < s.num_segments(); ++u)
      if (s.numel(u) > 0)
        engine(p).reduce_scatter(u, view_at(full, DType::f32, s.padded_offset(u), s.padded_numel(u), alloc_->device()),
                                 view_at(reduced_, DType::f32, shards_->part_base(p) + s.slice_offset(u),
                                         s.slice_numel(u), alloc_->device()),
                                 false);
    engine(p).complete();
  }
  const ConstTensorView g = slice(reduced_, DType::f32);
  const double sq = norm_->sum_squares(g, *opt_, nullptr);
  // The update alone: the collectives around it are the harness's exposed communication.
  const Stopwatch update;
  StepFinish end;
  end.update = opt_->step(g, sq, step, lr);
  end.optimizer_seconds = update.wall();
  gather_params();
  return end;
}

std::vector<float> ExpertOptimizerScheduler::gather_slices(ConstTensorView mine) {
  const std::vector<float> host = host_floats(mine, stream_);
  std::vector<float> out(static_cast<std::size_t>(n_), 0.0f);
  for (const Part p : kParts) {
    const ShardLayout& s = shards_->shards(p);
    coll::Communicator& c = p == Part::dense ? *dense_debug_ : *expert_debug_;
    const std::int64_t len = s.slice_total(), base = shards_->part_base(p);
    std::vector<float> all(static_cast<std::size_t>(len * c.size()));
    c.all_gather(ConstTensorView(host.data() + base, Shape{len}, DType::f32),
                 TensorView(all.data(), Shape{len * c.size()}, DType::f32), StreamRef::host());
    for (int r = 0; r < c.size(); ++r)
      for (const ExpertShardLayout::SliceRun& run : shards_->slice_runs(p == Part::dense ? r : 0, p == Part::expert ? r : 0))
        if (run.part == p)
          std::copy_n(all.data() + r * len + (run.local - base), run.count, out.data() + run.flat);
  }
  return out;
}

std::vector<float> ExpertOptimizerScheduler::gather_working_params() {  // every rank holds its whole flat model
  const Allocation out = alloc_->allocate(static_cast<std::size_t>(n_) * sizeof(float), AllocationTag::comm);
  const TensorView f = view_at(out, DType::f32, 0, n_, alloc_->device());
  kernels::cast(f, params(), stream_);
  return host_floats(f, stream_);
}

ReplicaDigests ExpertOptimizerScheduler::replicated_state() const {
  // The working parameters are replicated over the ranks holding the same pieces (tp and ep coordinates); the
  // optimizer state is sharded.
  ReplicaDigests d;
  d.replica_key = expert_->ep_rank() * tpx_->size() + tpx_->rank();
  const std::vector<std::byte> host = host_copy(params(), stream_);
  d.digests.emplace_back("param", state_digest(host.data(), host.size()));
  return d;
}

}  // namespace

void check_expert_optimizer(const workloads::TrainConfig& train, const ParallelDims& dims) {
  if (train.deterministic)
    HZP_THROW(ConfigError, "scheduler nd: train.deterministic = true with scheduler.distributed_optimizer = true and "
              "expert pieces or tensor-parallel gradient shares (scheduler.ep = ", dims.ep, ", scheduler.tp = ",
              dims.tp, ") is not implemented. Fix: train.deterministic = false, or scheduler.distributed_optimizer "
              "= false");
}

std::unique_ptr<Scheduler> make_expert_optimizer_nd_scheduler(const SchedulerArgs& args) {
  return std::make_unique<ExpertOptimizerScheduler>(args);
}

}  // namespace hzp::schedulers
