// The ZeRO family, synchronous: zero1 (optimizer state sharded), zero2 (+ gradients), zero3 (+ parameters)
// and hsdp (zero3 inside contiguous groups of Z ranks, replicated across W/Z groups). One engine, since
// the four differ only in which state is sharded; a single code path keeps their numerics identical,
// which is what the parity matrix checks. Every collective runs inline on the calling thread.
//
// Gradient reduction is a reduce-scatter everywhere, because a rank's optimizer updates only its own
// slice: only that slice of the summed gradient is needed, a reduce-scatter sends (W−1)/W of the gradient
// per rank (half an all-reduce's 2(W−1)/W), and it leaves gradient memory at 4N/W where the stage allows.
// zero1 reduce-scatters once at the end of accumulation (its full gradient buffer accumulates locally);
// zero2/zero3/hsdp reduce-scatter per unit per micro-batch as soon as the unit's gradient is final.
// Deterministic mode (train.deterministic): every micro-batch's gradient block is written fresh (zero1
// too), converted to int64 fixed point once final, and summed as int64 (zero1 locally then one reduce-
// scatter; the others by a reduce-scatter per micro-batch, and hsdp's replicas by an int64 all-reduce);
// the slice is converted back to fp32 once, for the exact norm and the update.
// zero1's engine is also nd's distributed optimizer (Megatron's): the same slices over the mesh's data-parallel
// group of a model split over a tensor-parallel group and cut into pipeline stages (the tied table's two stages add
// their gradients before the reduce-scatter, shared_stage_grads.hpp), the norm counting each distinct element once.
#include <cstring>
#include <memory>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/common/checkpoint_state.hpp"
#include "hzp/schedulers/common/model_runs.hpp"
#include "hzp/schedulers/common/distinct_norm.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/common/gather_scatter.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/common/state_dump.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/step/parameter_engine.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::schedulers {
namespace {

using workloads::ParamLayout;

// The scheduler is its own parameter engine; the step's loop is the shared StepDriver's.
class ZeroScheduler final : public DataParallelScheduler, private ParameterEngine {
 public:
  ZeroScheduler(const SchedulerArgs& args, int stage, bool hybrid, std::string name);
  std::string_view name() const override { return name_; }
  StepStats step(const StepBatch& batch) override { return driver_->step(batch, *this); }
  ReplicaDigests replicated_state() const override;
  std::vector<float> gather_gradient() override;
  std::vector<float> gather_master_params() override;
  std::vector<float> gather_working_params() override;
  std::vector<float> gather_moment(bool second) override { return gather_slices(second ? opt_->v() : opt_->m()); }
  void visit_state(StateVisitor& visitor) override {
    visit_gathered_state(*this, model_->layout(), train_.precision, groups_->rank() == 0, tpx_->debug(), visitor);
  }
  void checkpoint(StateArchive& archive) override;

 private:
  bool full_params() const { return stage_ < 3; }
  // Buffers on the engine's device (the host, or one GPU: engine_memory.hpp), zeroed on its stream.
  TensorView at(const Allocation& a, DType t, std::int64_t offset, std::int64_t n) const {
    return view_at(a, t, offset, n, alloc_->device());
  }
  Allocation zeroed(std::int64_t n, DType t, AllocationTag tag) const { return zeroed_on(*alloc_, n, t, tag, stream_); }
  // Parameter slice of unit u held by this rank (inside the full buffer for stages 1-2).
  TensorView param_slice(int u) const {
    return full_params() ? at(params_, pdt_, shards_->padded_offset(u) + std::int64_t(idx_) * shards_->slice_numel(u),
                              shards_->slice_numel(u))
                         : at(params_, pdt_, shards_->slice_offset(u), shards_->slice_numel(u));
  }
  TensorView full_param_block(int u) const {
    return at(params_, pdt_, shards_->padded_offset(u), shards_->padded_numel(u));
  }
  // Gradient element type: fp32, or the int64 fixed-point sum in deterministic mode.
  DType gdt() const { return fixed_ ? DType::i64 : DType::f32; }
  // The gradient slice the optimizer reads: zero1's reduced slice, otherwise the gradient shard.
  TensorView grad_slice() const {
    return stage_ == 1 ? at(reduced_, gdt(), 0, shards_->slice_total()) : at(grads_, gdt(), 0, shards_->slice_total());
  }
  // Deterministic mode: grad_slice() converted to fp32 (padding zero), in a comm-tagged buffer.
  Allocation converted_slice() const;
  // One micro-batch's final fp32 gradient block `b` (deterministic mode): to fixed point, then summed.
  void fixed_block_done(int b, bool first_micro_batch);
  // zero1/zero2: every unit's full block all-gathered from the slices (after construction, an update, or a restored
  // checkpoint); nothing for zero3/hsdp, which gather per unit as they go.
  void gather_full_params();
  // zero3/hsdp: makes sure the full blocks `blocks` are gathered.
  void ensure_gathered(const std::vector<int>& blocks);
  workloads::UnitParams params_of(int u) const;

  // --- ParameterEngine: zero3/hsdp gather each unit before use and free it after its last use; every
  // stage reduce-scatters (zero1 once per step, in finish_step; the others per unit and micro-batch) ---------
  void begin_attempt(std::int64_t, const std::vector<Action>&) override {}
  workloads::UnitParams unit_params(int u, const Action&) override {
    if (!full_params()) ensure_gathered(model_->layout().param_blocks(u));
    return params_of(u);
  }
  void forward_done(int u, const Action&) override {
    if (!full_params())
      for (int b : model_->layout().params_last_used_in_forward(u)) gathered_[b].reset();
  }
  workloads::UnitGrads unit_grads(int u, const Action& a) override;
  void backward_done(int u, const Action& a) override;
  FixedPointGrads* fixed_point() noexcept override { return fixed_.get(); }
  coll::Communicator& scalars() noexcept override { return *scalars_comm_; }
  coll::Communicator& verdict_group() noexcept override { return tpx_->verdict_or(*scalars_comm_); }
  StepFinish finish_step(std::int64_t step, double lr) override;

  // Every shard group member's fp32 slice (slice order), all-gathered uncounted, as a flat [N] vector.
  std::vector<float> gather_slices(ConstTensorView mine);

  std::string name_;
  int stage_;
  bool hybrid_;
  const workloads::Workload* model_;
  workloads::TrainConfig train_;
  CachingAllocator* alloc_;
  StreamRef stream_ = StreamRef::host();  // the compute stream: every kernel and collective is ordered on it
  std::unique_ptr<ProcessGroups> own_groups_;  // when the caller handed none (SchedulerArgs::groups)
  const ProcessGroups* groups_;
  coll::Communicator* world_;  // the data-parallel group
  DType pdt_;
  int z_ = 1, idx_ = 0;
  std::unique_ptr<coll::Communicator> shard_comm_, replica_comm_, scalars_comm_, debug_comm_;
  // Tensor parallelism: the ranks holding distinct parts (shards × tp) for the norm; the dump's gathers and
  // deterministic mode's verdict.
  std::unique_ptr<coll::Communicator> distinct_comm_;
  std::unique_ptr<TensorParallelExtras> tpx_;
  std::unique_ptr<SharedStageGrads> shared_;
  std::unique_ptr<DistinctNorm> norm_;
  std::unique_ptr<ShardLayout> shards_;
  std::unique_ptr<GatherScatter> engine_;
  Allocation params_;   // stages 1-2: full padded buffer; stage 3: this rank's shard
  Allocation grads_;    // stage 1: full padded buffer; stages 2-3: this rank's shard
  Allocation reduced_;  // stage 1 only: the reduce-scatter's output slice (tag comm)
  std::unique_ptr<ShardedOptimizer> opt_;
  std::vector<Allocation> gathered_;    // stage 3: full parameter blocks held now, per unit
  std::vector<Allocation> grad_blocks_; // stages 2-3: full gradient blocks being written, per unit
  std::unique_ptr<StepDriver> driver_;
  std::unique_ptr<FixedPointGrads> fixed_;  // deterministic mode only
};

ZeroScheduler::ZeroScheduler(const SchedulerArgs& args, int stage, bool hybrid, std::string name)
    : name_(std::move(name)), stage_(stage), hybrid_(hybrid) {
  const int z_opt = hybrid ? args.options.group_size : 0;
  validate_data_parallel(name_, args, z_opt, scheduler_parallel_dims(name_, args.options, args.world->size()).dp());
  model_ = args.model;
  train_ = args.train;
  alloc_ = args.allocator;
  stream_ = args.stream;
  pdt_ = workloads::param_dtype(train_.precision);
  // The mesh's dp_shard groups are contiguous ranks (inside a node when Z = ranks_per_node), its dp_replicate
  // groups strided by Z; with tensor parallelism, among the ranks holding the same pieces.
  groups_ = &scheduler_groups(name_, args, own_groups_);
  // Context-parallel ranks hold their own tokens of the same micro-batches: for the weights they are data-parallel,
  // so the shards span dp_shard × cp (Megatron's distributed optimizer over the data × context group).
  z_ = groups_->dims().dp_shard * groups_->dims().cp;
  world_ = &groups_->data_parallel();
  check_tensor_parallel_model(name_, *groups_, *model_);
  check_context_parallel_model(name_, *groups_, *model_);
  refuse_tp_shares(model_->layout(), groups_->dims().tp, name_);
  shard_comm_ = groups_->split({kAxisShard, kAxisContext}, "shard");
  if (hybrid_) replica_comm_ = groups_->split({kAxisReplicate}, "replica");
  scalars_comm_ = world_->duplicate("scalars");
  debug_comm_ = shard_comm_->duplicate("debug", /*share_counters=*/false);
  idx_ = shard_comm_->rank();
  HZP_CHECK(groups_->dims().pp == 1 || stage_ == 1, "scheduler ", name_, ": pipeline stages run with zero1's engine "
            "only (nd's distributed optimizer)");
  if (groups_->dims().pp > 1)
    distinct_comm_ = groups_->split({kAxisPipeline, kAxisShard, kAxisContext, kAxisTensor}, "distinct");
  else if (groups_->tensor() != nullptr)
    distinct_comm_ = groups_->split({kAxisShard, kAxisContext, kAxisTensor}, "distinct");
  tpx_ = std::make_unique<TensorParallelExtras>(*groups_, args.train.deterministic);

  const ParamLayout& layout = model_->layout();
  shared_ = std::make_unique<SharedStageGrads>(*groups_, layout);
  if (train_.deterministic)
    fixed_ = std::make_unique<FixedPointGrads>(layout, gradient_summands(train_, groups_->dims()), args.fixed_point);
  shards_ = std::make_unique<ShardLayout>(ShardLayout::per_unit(layout, z_));
  norm_ = std::make_unique<DistinctNorm>(layout, *shards_, idx_, tpx_->size(), tpx_->rank(),
                                         distinct_comm_ ? distinct_comm_.get() : shard_comm_.get());
  engine_ = std::make_unique<GatherScatter>(*shard_comm_, *shards_, *alloc_, stream_);
  const int units = layout.num_units();

  params_ = zeroed(full_params() ? shards_->padded_total() : shards_->slice_total(), pdt_, AllocationTag::param);
  grads_ = zeroed(stage_ == 1 ? shards_->padded_total() : shards_->slice_total(), gdt(), AllocationTag::grad);
  if (stage_ == 1) reduced_ = zeroed(shards_->slice_total(), gdt(), AllocationTag::comm);

  std::vector<TensorView> pieces;
  for (int u = 0; u < units; ++u) pieces.push_back(param_slice(u));
  opt_ = std::make_unique<ShardedOptimizer>(train_, std::move(pieces), *alloc_,
                                            slice_initializer(*model_, *shards_, idx_, train_.seed), stream_);
  // Stages 1-2 hold full parameters: gather every unit's initial slices once.
  gather_full_params();

  gathered_.resize(static_cast<std::size_t>(units));
  grad_blocks_.resize(static_cast<std::size_t>(units));
  driver_ = std::make_unique<StepDriver>(name_, *model_, train_, *alloc_, world_->rank(), world_->size(),
                                         step_pipeline(args.options, *groups_, units), groups_->context(), stream_);
  driver_->set_unit_sleep(UnitSleep(args.options));
}

// This rank's optimizer slice as flat runs (hsdp: replica 0 writes); on load, zero1/2's full parameters gathered
// from the restored slices as the constructor gathers the initial ones.
void ZeroScheduler::checkpoint(StateArchive& archive) {
  // nd's distributed optimizer: the slice is of this rank's pieces and stage, mapped to the whole model's order.
  const std::vector<StateArchive::Run> slice = shards_->flat_runs(idx_);
  const TensorWriter writes = archive.loading() ? TensorWriter([](const auto&, const auto&) { return true; })
                                                : piece_writer(*groups_, true, true);
  opt_->checkpoint(archive, model_runs(model_->layout(), slice, writes), !hybrid_ || replica_comm_->rank() == 0);
  if (archive.loading()) {
    gather_full_params();
    driver_->resume_at(archive.next_step());
  }
  checkpoint_side_state(archive, *model_, fixed_.get(), groups_->pipeline());
}

void ZeroScheduler::gather_full_params() {
  if (!full_params()) return;
  for (int u = 0; u < model_->layout().num_units(); ++u)
    if (shards_->numel(u) > 0) engine_->gather_into(u, param_slice(u), full_param_block(u));
  engine_->complete();
}

void ZeroScheduler::ensure_gathered(const std::vector<int>& blocks) {
  for (int b : blocks)
    if (!gathered_[b]) gathered_[b] = engine_->gather(b, param_slice(b));
}

workloads::UnitParams ZeroScheduler::params_of(int u) const {
  workloads::UnitParams p;
  for (int b : model_->layout().param_blocks(u)) {
    if (full_params())
      p.set(b, at(params_, pdt_, shards_->padded_offset(b), shards_->numel(b)));
    else
      p.set(b, engine_->real_part(b, gathered_[b], pdt_));
  }
  return p;
}

workloads::UnitGrads ZeroScheduler::unit_grads(int u, const Action& a) {
  // Full gradient blocks are written, and reduce-scattered once final (backward_done).
  const ParamLayout& layout = model_->layout();
  const bool first = a.micro_batch == 0;
  workloads::UnitGrads g;
  for (int b : layout.grad_blocks(u)) {
    const bool first_writer = u == layout.first_grad_writer(b);
    if (stage_ == 1 && !fixed_) {
      // Local accumulation over micro-batches, as a single rank would do.
      g.set(b, at(grads_, DType::f32, shards_->padded_offset(b), shards_->numel(b)), !(first && first_writer));
    } else {
      if (first_writer) {
        // Padding must be zero: it takes part in the reduce-scatter.
        grad_blocks_[b] = alloc_->allocate(static_cast<std::size_t>(shards_->padded_numel(b)) * sizeof(float),
                                           AllocationTag::comm);
        const std::int64_t pad = shards_->padded_numel(b) - shards_->numel(b);
        if (pad > 0) zero_bytes(grad_blocks_[b].data_as<float>() + shards_->numel(b), std::size_t(pad) * 4, stream_);
      }
      g.set(b, at(grad_blocks_[b], DType::f32, 0, shards_->numel(b)), !first_writer);
    }
  }
  return g;
}

void ZeroScheduler::backward_done(int u, const Action& a) {
  const bool first = a.micro_batch == 0;
  for (int b : model_->layout().grads_final_after(u)) {
    if (fixed_) {
      fixed_block_done(b, first);
    } else if (stage_ != 1) {
      engine_->reduce_scatter(b, at(grad_blocks_[b], DType::f32, 0, shards_->padded_numel(b)),
                              at(grads_, DType::f32, shards_->slice_offset(b), shards_->slice_numel(b)), !first);
      grad_blocks_[b].reset();
    }
    // A block's last backward use is its last gradient writer (grad_blocks == param_blocks).
    if (!full_params()) gathered_[b].reset();
  }
}

StepFinish ZeroScheduler::finish_step(std::int64_t step, double lr) {
  const int units = model_->layout().num_units();
  const TensorView gslice = grad_slice();
  // A pipeline's tied table: its two stages' contributions added first (zero1 holds the full gradient).
  shared_->all_reduce([&](int u) { return at(grads_, gdt(), shards_->padded_offset(u), shards_->numel(u)); }, stream_);
  if (stage_ == 1)
    for (int u = 0; u < units; ++u)
      if (shards_->numel(u) > 0)
        engine_->reduce_scatter(u, at(grads_, gdt(), shards_->padded_offset(u), shards_->padded_numel(u)),
                              at(reduced_, gdt(), shards_->slice_offset(u), shards_->slice_numel(u)), false);
  // hsdp: each shard group holds the sum over its own micro-batches; the replicas add theirs.
  coll::StreamOrderedRequests replica(stream_);
  if (hybrid_ && replica_comm_->size() > 1 && gslice.numel() > 0)
    replica.settle(replica_comm_->start_all_reduce(gslice, coll::ReduceOp::sum, stream_));
  Allocation g32;
  ConstTensorView g = gslice;
  if (fixed_) {
    g32 = converted_slice();
    g = ConstTensorView(g32.data(), Shape{shards_->slice_total()}, DType::f32);
  }
  // On a GPU the step's reduce-scatters (and hsdp's replica sum) are ordered on the stream; their requests end here.
  engine_->complete();
  replica.complete();
  const double sq = norm_->sum_squares(g, *opt_, fixed_.get());
  // The update alone: the collectives around it (reduce-scatters, the norm's all-reduce, the gathers)
  // are the harness's exposed communication, so counting them here too would break the step's closure.
  const Stopwatch update;
  StepFinish end;
  end.update = opt_->step(g, sq, step, lr);
  end.optimizer_seconds = update.wall();
  gather_full_params();
  return end;
}

void ZeroScheduler::fixed_block_done(int b, bool first_micro_batch) {
  const std::int64_t n = shards_->numel(b);
  const ConstTensorView g(grad_blocks_[b].data(), Shape{n}, DType::f32);
  if (stage_ == 1) {
    // Local integer accumulation over micro-batches (padding stays zero: it is never written).
    fixed_->to_fixed(b, g, at(grads_, DType::i64, shards_->padded_offset(b), n), !first_micro_batch);
  } else {
    Allocation q = zeroed(shards_->padded_numel(b), DType::i64, AllocationTag::comm);
    fixed_->to_fixed(b, g, at(q, DType::i64, 0, n), false);
    grad_blocks_[b].reset();  // before the collective: the peak holds one block's fp32 or int64, not both
    engine_->reduce_scatter(b, at(q, DType::i64, 0, shards_->padded_numel(b)),
                            at(grads_, DType::i64, shards_->slice_offset(b), shards_->slice_numel(b)), !first_micro_batch);
  }
  grad_blocks_[b].reset();
}

Allocation ZeroScheduler::converted_slice() const {
  Allocation out = zeroed(shards_->slice_total(), DType::f32, AllocationTag::comm);
  const TensorView q = grad_slice();
  for (int u = 0; u < shards_->num_segments(); ++u) {
    const ShardLayout::Range r = shards_->valid_range(u, idx_);
    if (r.count > 0)
      fixed_->to_float(u, r.begin,
                       ConstTensorView(q.as<std::int64_t>() + shards_->slice_offset(u), Shape{r.count}, DType::i64),
                       at(out, DType::f32, shards_->slice_offset(u), r.count));
  }
  return out;
}

ReplicaDigests ZeroScheduler::replicated_state() const {
  ReplicaDigests d;
  auto add = [&](const char* name, const void* p, std::size_t bytes) {
    const std::vector<std::byte> host = host_copy(ConstTensorView(p, Shape{static_cast<std::int64_t>(bytes)}, DType::u8,
                                                                  alloc_->device()), stream_);
    d.digests.emplace_back(name, state_digest(host.data(), bytes));
  };
  const std::int64_t s = shards_->slice_total();
  if (full_params()) {
    // zero1/zero2: the full working parameters are replicated over the data-parallel group (the world without
    // tensor parallelism; the ranks holding the same pieces with it).
    d.replica_key = tpx_->rank();
    add("param", params_.data(), static_cast<std::size_t>(shards_->padded_total()) * dtype_size(pdt_));
  } else if (hybrid_ && replica_comm_->size() > 1) {
    // hsdp: every state is a shard replicated across the W/Z groups (same position in each).
    d.replica_key = idx_;
    add("param", params_.data(), static_cast<std::size_t>(s) * dtype_size(pdt_));
    add("grad", grads_.data(), static_cast<std::size_t>(s) * dtype_size(gdt()));
    if (opt_->has_master()) add("master", opt_->master().data(), opt_->master().bytes());
    add("m", opt_->m().data(), opt_->m().bytes());
    add("v", opt_->v().data(), opt_->v().bytes());
  } else {
    // zero3 (and hsdp with Z = W): every rank's state is its own shard; nothing is replicated.
    d.replica_key = groups_->rank();
  }
  return d;
}

std::vector<float> ZeroScheduler::gather_gradient() {
  const Allocation g32 = fixed_ ? converted_slice() : Allocation{};
  return gather_slices(fixed_ ? ConstTensorView(g32.data(), Shape{shards_->slice_total()}, DType::f32)
                              : ConstTensorView(grad_slice()));
}

std::vector<float> ZeroScheduler::gather_master_params() {
  if (opt_->has_master()) return gather_slices(opt_->master());
  return gather_working_params();  // fp32: the parameter pieces are the master
}

std::vector<float> ZeroScheduler::gather_working_params() {
  // Each rank's own piece of every segment (the optimizer writes it; zero1/2 then all-gather the full copy).
  const Allocation mine = zeroed(shards_->slice_total(), DType::f32, AllocationTag::comm);
  for (int u = 0; u < shards_->num_segments(); ++u)
    if (shards_->slice_numel(u) > 0)
      kernels::cast(at(mine, DType::f32, shards_->slice_offset(u), shards_->slice_numel(u)), param_slice(u), stream_);
  return gather_slices(at(mine, DType::f32, 0, shards_->slice_total()));
}

std::vector<float> ZeroScheduler::gather_slices(ConstTensorView mine) {
  const std::int64_t s = shards_->slice_total();
  std::vector<float> all(static_cast<std::size_t>(s * z_));
  // Off the hot path (tests, the state dump): the slice comes to the host first, and a NCCL group stages host
  // buffers itself.
  std::vector<float> host = host_floats(mine, stream_);
  debug_comm_->all_gather(ConstTensorView(host.data(), Shape{s}, DType::f32),
                          TensorView(all.data(), Shape{s * z_}, DType::f32), StreamRef::host());
  std::vector<float> out(static_cast<std::size_t>(shards_->total_numel()));
  for (int u = 0; u < shards_->num_segments(); ++u)
    for (int r = 0; r < z_; ++r) {
      const ShardLayout::Range v = shards_->valid_range(u, r);
      if (v.count > 0)
        std::memcpy(out.data() + shards_->global_offset(u) + v.begin, all.data() + r * s + shards_->slice_offset(u),
                    static_cast<std::size_t>(v.count) * sizeof(float));
    }
  return out;
}

}  // namespace

std::unique_ptr<Scheduler> make_zero1_scheduler(const SchedulerArgs& a) {
  return std::make_unique<ZeroScheduler>(a, 1, false, "zero1");
}
std::unique_ptr<Scheduler> make_zero2_scheduler(const SchedulerArgs& a) {
  return std::make_unique<ZeroScheduler>(a, 2, false, "zero2");
}
std::unique_ptr<Scheduler> make_zero3_scheduler(const SchedulerArgs& a) {
  return std::make_unique<ZeroScheduler>(a, 3, false, "zero3");
}
std::unique_ptr<Scheduler> make_hsdp_scheduler(const SchedulerArgs& a) {
  return std::make_unique<ZeroScheduler>(a, 3, true, "hsdp");
}
std::unique_ptr<Scheduler> make_distributed_optimizer_nd_scheduler(const SchedulerArgs& a) {
  return std::make_unique<ZeroScheduler>(a, 1, false, "nd");
}

}  // namespace hzp::schedulers
