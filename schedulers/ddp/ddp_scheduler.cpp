// `ddp`: full replicas of parameters, gradients and optimizer state on every rank; gradients summed over
// the world by a bucketed all-reduce launched as units finish backward on the last micro-batch
// (scheduler.bucket_mb), non-blocking and awaited at the end of backward (scheduler.overlap = true) or
// blocking inline. The optimizer is the shared ShardedOptimizer over the whole model as one slice. The same
// engine is nd's without the distributed optimizer: replicas over the mesh's data-parallel group of a model
// split over a tensor-parallel group and cut into pipeline stages (the model then holds its stage's units, the
// tied table's two stages add their gradients, shared_stage_grads.hpp), the norm counting each distinct element
// once (distinct_norm.hpp).
// Deterministic mode (train.deterministic): each micro-batch's gradient blocks are written fresh into
// transient fp32 blocks, converted to fixed point once final and added into an int64 buffer, which the
// buckets all-reduce (int64 sums: exact); converted back to fp32 once for the norm and the update.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/common/bucketed_all_reduce.hpp"
#include "hzp/schedulers/common/checkpoint_state.hpp"
#include "hzp/schedulers/common/model_runs.hpp"
#include "hzp/schedulers/common/distinct_norm.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
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

// The scheduler is its own parameter engine; the step's loop is the shared StepDriver's.
class DdpScheduler final : public DataParallelScheduler, private ParameterEngine {
 public:
  DdpScheduler(const SchedulerArgs& args, std::string name);
  std::string_view name() const override { return name_; }
  StepStats step(const StepBatch& batch) override { return driver_->step(batch, *this); }
  ReplicaDigests replicated_state() const override;
  std::vector<float> gather_gradient() override;
  std::vector<float> gather_master_params() override;
  std::vector<float> gather_working_params() override;
  std::vector<float> gather_moment(bool second) override;
  void visit_state(StateVisitor& visitor) override {
    visit_gathered_state(*this, model_->layout(), train_.precision, groups_->rank() == 0, tpx_->debug(), visitor,
                         expert_ ? expert_->debug() : nullptr);
  }
  // Whole replicas: the data-parallel rank 0 writes everything, every rank reads everything. Under nd the model is
  // this rank's pieces and stage, mapped to the whole model's order; one rank writes each piece (model_runs.hpp).
  void checkpoint(StateArchive& archive) override {
    const std::vector<StateArchive::Run> whole = whole_model_runs(n_);
    const TensorWriter writes =
        archive.loading() ? TensorWriter([](const auto&, const auto&) { return true; })
                          : piece_writer(*groups_, groups_->data_parallel().rank() == 0,
                                         expert_ ? expert_->expert_data().rank() == 0 : true);
    opt_->checkpoint(archive, model_runs(model_->layout(), whole, writes), true);
    if (archive.loading()) driver_->resume_at(archive.next_step());
    checkpoint_side_state(archive, *model_, fixed_.get(), groups_->pipeline());
  }

 private:
  std::string name_;
  const workloads::Workload* model_;
  workloads::TrainConfig train_;
  CachingAllocator* alloc_;
  StreamRef stream_ = StreamRef::host();  // the compute stream: every kernel and collective is ordered on it
  std::unique_ptr<ProcessGroups> own_groups_;  // when the caller handed none (SchedulerArgs::groups)
  const ProcessGroups* groups_;
  coll::Communicator* world_;  // the data-parallel group
  std::unique_ptr<TensorParallelExtras> tpx_;
  std::unique_ptr<coll::Communicator> distinct_comm_;  // pipeline: the stages × tensor-parallel pieces, for the norm
  std::unique_ptr<SharedStageGrads> shared_;
  std::unique_ptr<DistinctNorm> norm_;
  std::unique_ptr<ExpertDataParallel> expert_;  // nd with ep > 1 or an MoE model under tp: the gradients' groups
  DType pdt_;
  std::int64_t n_;
  std::unique_ptr<coll::Communicator> dp_comm_, scalars_comm_;
  Allocation params_, grads_;
  std::unique_ptr<ShardedOptimizer> opt_;
  std::unique_ptr<BucketedAllReduce> buckets_;
  std::unique_ptr<StepDriver> driver_;
  int last_micro_batch_ = 0;                // the rank's last local micro-batch: its gradients are final
  std::unique_ptr<FixedPointGrads> fixed_;  // deterministic mode only
  std::vector<Allocation> blocks_;          // deterministic mode: one micro-batch's fp32 gradient blocks

  DType gdt() const { return fixed_ ? DType::i64 : DType::f32; }
  TensorView params() const { return view_at(params_, pdt_, 0, n_, alloc_->device()); }
  // fp32 gradients, or their int64 fixed-point sum in deterministic mode.
  TensorView grads() const { return view_at(grads_, gdt(), 0, n_, alloc_->device()); }
  // Deterministic mode: the fixed-point sum converted to fp32 (a comm-tagged buffer).
  Allocation converted_gradient() const;

  // --- ParameterEngine: full replicas; a bucketed all-reduce on the last micro-batch's backward ---------
  void begin_attempt(std::int64_t, const std::vector<Action>&) override { buckets_->begin(); }
  workloads::UnitParams unit_params(int u, const Action&) override {
    return workloads::unit_params_from_flat(model_->layout(), u, params());
  }
  void forward_done(int, const Action&) override {}
  workloads::UnitGrads unit_grads(int u, const Action& a) override;
  void backward_done(int u, const Action& a) override;
  void attempt_done() override {
    buckets_->finish();
    if (expert_) expert_->finish_sums(grads());  // the dense ranges over the ep group, the tp shares over tp
  }
  FixedPointGrads* fixed_point() noexcept override { return fixed_.get(); }
  coll::Communicator& scalars() noexcept override { return *scalars_comm_; }
  coll::Communicator& verdict_group() noexcept override { return tpx_->verdict_or(*scalars_comm_); }
  StepFinish finish_step(std::int64_t step, double lr) override;
};

DdpScheduler::DdpScheduler(const SchedulerArgs& args, std::string name) : name_(std::move(name)) {
  validate_data_parallel(name_, args, 0, scheduler_parallel_dims(name_, args.options, args.world->size()).dp());
  model_ = args.model;
  train_ = args.train;
  alloc_ = args.allocator;
  stream_ = args.stream;
  // Full replicas over the mesh's data-parallel group (every rank for ddp; the ranks holding the same
  // tensor-parallel pieces for nd).
  groups_ = &scheduler_groups(name_, args, own_groups_);
  world_ = &groups_->data_parallel();
  check_tensor_parallel_model(name_, *groups_, *model_);
  check_context_parallel_model(name_, *groups_, *model_);
  tpx_ = std::make_unique<TensorParallelExtras>(*groups_, args.train.deterministic);
  // Replicated over dp: the norm is a sum over ranks only across the tensor-parallel pieces and pipeline stages.
  if (groups_->dims().pp > 1) distinct_comm_ = groups_->split({kAxisPipeline, kAxisTensor}, "distinct");
  shared_ = std::make_unique<SharedStageGrads>(*groups_, model_->layout());
  norm_ = std::make_unique<DistinctNorm>(model_->layout(), ShardLayout::per_unit(model_->layout(), 1), 0, tpx_->size(),
                                         tpx_->rank(), distinct_comm_ ? distinct_comm_.get() : tpx_->group());
  // Expert parallelism (and an MoE model under tensor parallelism): the ep ranks hold distinct experts, the tp ranks
  // distinct pieces; the norm counts each once and sums over the ep group × the tp group × the stages.
  expert_ = ExpertDataParallel::make(*groups_, model_->layout());
  if (expert_) norm_ = std::make_unique<DistinctNorm>(expert_->norm_ranges(model_->layout()), expert_->distinct());
  pdt_ = workloads::param_dtype(train_.precision);
  n_ = model_->layout().total_numel();
  // Gradients are summed over the ranks with the same pieces: the data-parallel group, times the context-parallel
  // group when the sequences are split (each of its ranks contributes its own tokens' share).
  // With expert parallelism the buckets sum over the ranks holding the same experts, and attempt_done adds the
  // dense ranges' sum over the ep group (expert_data_parallel.hpp).
  dp_comm_ = expert_ ? expert_->expert_data().duplicate("dp") : groups_->data_context().duplicate("dp");
  scalars_comm_ = world_->duplicate("scalars");
  params_ = alloc_->allocate(static_cast<std::size_t>(n_) * dtype_size(pdt_), AllocationTag::param);
  if (train_.deterministic) {
    fixed_ = std::make_unique<FixedPointGrads>(model_->layout(), gradient_summands(train_, groups_->dims()),
                                               args.fixed_point);
    blocks_.resize(static_cast<std::size_t>(model_->layout().num_units()));
  }
  grads_ = zeroed_on(*alloc_, n_, gdt(), AllocationTag::grad, stream_);
  // Every replica initialises the whole model from the counter-based initialiser: identical bits
  // everywhere without a broadcast.
  opt_ = std::make_unique<ShardedOptimizer>(train_, std::vector<TensorView>{params()}, *alloc_,
                                            [&](std::span<float> m) { model_->init_params(0, m, train_.seed); },
                                            stream_);
  const auto bucket_bytes = static_cast<std::size_t>(args.options.bucket_mb * 1024.0 * 1024.0);
  buckets_ = std::make_unique<BucketedAllReduce>(*dp_comm_, model_->layout(), grads(),
                                                 std::max<std::size_t>(bucket_bytes, 1), args.options.overlap, stream_);
  driver_ = std::make_unique<StepDriver>(name_, *model_, train_, *alloc_, world_->rank(), world_->size(),
                                         step_pipeline(args.options, *groups_, model_->layout().num_units()),
                                         groups_->context(), stream_);
  driver_->set_unit_sleep(UnitSleep(args.options));
  last_micro_batch_ = static_cast<int>(train_.micro_batches() / world_->size()) - 1;
}

workloads::UnitGrads DdpScheduler::unit_grads(int u, const Action& a) {
  const workloads::ParamLayout& layout = model_->layout();
  if (!fixed_) return workloads::unit_grads_from_flat(layout, u, grads(), /*fresh=*/a.micro_batch == 0);
  // Deterministic mode: each micro-batch's blocks are written fresh into transient fp32 blocks.
  workloads::UnitGrads g;
  for (int b : layout.grad_blocks(u)) {
    const bool first_writer = u == layout.first_grad_writer(b);
    if (first_writer)
      blocks_[b] = alloc_->allocate(static_cast<std::size_t>(layout.unit_numel(b)) * sizeof(float), AllocationTag::comm);
    g.set(b, TensorView(blocks_[b].data(), Shape{layout.unit_numel(b)}, DType::f32), !first_writer);
  }
  return g;
}

void DdpScheduler::backward_done(int u, const Action& a) {
  const workloads::ParamLayout& layout = model_->layout();
  if (fixed_)
    for (int b : layout.grads_final_after(u)) {
      fixed_->to_fixed(b, ConstTensorView(blocks_[b].data(), Shape{layout.unit_numel(b)}, DType::f32),
                       workloads::unit_block(layout, b, grads()), /*accumulate=*/a.micro_batch > 0);
      blocks_[b].reset();
    }
  // Only the last micro-batch's gradients are final for the step: reduce once per step, not per micro-batch
  // (what DDP's no_sync does for accumulation).
  if (a.micro_batch == last_micro_batch_) buckets_->on_backward_done(u);
}

StepFinish DdpScheduler::finish_step(std::int64_t step, double lr) {
  shared_->all_reduce([&](int u) { return workloads::unit_block(model_->layout(), u, grads()); }, stream_);
  const Stopwatch opt;
  StepFinish end;
  if (fixed_) {
    const Allocation g32 = converted_gradient();
    const ConstTensorView g(g32.data(), Shape{n_}, DType::f32);
    // Replicated over dp: the local sum is global (over the tensor-parallel pieces when the model is split).
    const double sq = norm_->sum_squares(g, *opt_, fixed_.get());
    end.update = opt_->step(g, sq, step, lr);
  } else {
    const double sq = norm_->sum_squares(grads(), *opt_, nullptr);
    end.update = opt_->step(grads(), sq, step, lr);
  }
  end.optimizer_seconds = opt.wall();
  return end;
}

Allocation DdpScheduler::converted_gradient() const {
  Allocation g32 = alloc_->allocate(static_cast<std::size_t>(n_) * sizeof(float), AllocationTag::comm);
  const TensorView out(g32.data(), Shape{n_}, DType::f32);
  const workloads::ParamLayout& layout = model_->layout();
  for (int u = 0; u < layout.num_units(); ++u)
    fixed_->to_float(u, 0, workloads::unit_block(layout, u, ConstTensorView(grads())), workloads::unit_block(layout, u, out));
  return g32;
}

ReplicaDigests DdpScheduler::replicated_state() const {
  ReplicaDigests d;  // everything is replicated over the data-parallel group (the world without tensor parallelism)
  // Pieces differ across the tp group, expert pieces across the ep group.
  d.replica_key = expert_ ? expert_->ep_rank() * tpx_->size() + tpx_->rank() : tpx_->rank();
  const auto add = [&](const char* name, ConstTensorView v) {
    const std::vector<std::byte> host = host_copy(v, stream_);  // device state is read on the host
    d.digests.emplace_back(name, state_digest(host.data(), host.size()));
  };
  add("param", params());
  add("grad", grads());
  if (opt_->has_master()) add("master", opt_->master());
  add("m", opt_->m());
  add("v", opt_->v());
  return d;
}

std::vector<float> DdpScheduler::gather_gradient() {
  if (fixed_) {
    const Allocation g32 = converted_gradient();
    return std::vector<float>(g32.data_as<float>(), g32.data_as<float>() + n_);
  }
  return host_floats(grads(), stream_);
}

std::vector<float> DdpScheduler::gather_working_params() {  // replicated: this rank's copy is everyone's
  const Allocation out = alloc_->allocate(static_cast<std::size_t>(n_) * sizeof(float), AllocationTag::comm);
  const TensorView f = view_at(out, DType::f32, 0, n_, alloc_->device());
  kernels::cast(f, params(), stream_);
  return host_floats(f, stream_);
}

std::vector<float> DdpScheduler::gather_moment(bool second) { return host_floats(second ? opt_->v() : opt_->m(), stream_); }

std::vector<float> DdpScheduler::gather_master_params() {
  return host_floats(opt_->has_master() ? opt_->master() : ConstTensorView(params()), stream_);
}

}  // namespace

std::unique_ptr<Scheduler> make_ddp_scheduler(const SchedulerArgs& args) {
  return std::make_unique<DdpScheduler>(args, "ddp");
}

std::unique_ptr<Scheduler> make_replicated_nd_scheduler(const SchedulerArgs& args) {
  return std::make_unique<DdpScheduler>(args, "nd");
}

}  // namespace hzp::schedulers
