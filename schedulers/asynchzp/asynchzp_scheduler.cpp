// asynchzp: hierarchical ZeRO sharding (AsyncHZP, arXiv 2510.20111 §4.1; docs/data-parallel.md).
// bf16 parameters sharded over z3 ranks, fp32 gradients over z2, fp32 master + m + v over z1 (z3 | z2 |
// z1 | W, contiguous groups laid out by NestedGroups so every exchange is an all-gather or a
// reduce-scatter). Per micro-batch: each unit's
// parameters all-gathered in its z3 group before forward and again before backward, freed after use; its
// fp32 gradient reduce-scattered in the z2 group as soon as final. End of step: gradient shards combined
// across the W/z2 replicas (all-reduce, or reduce-scatter + all-gather over the W/z1 holders of a slice),
// AdamW on the z1 slice, the updated slices all-gathered back into the z3 shards.
//
// Async, the step end is cut per unit so that its inter-node traffic overlaps compute (docs/data-parallel.md
// "asynchzp"): a unit's exchange across the replicas is queued on the gradient thread right after its last
// reduce-scatter of the step, while backward goes on below it; the refresh of the shards from the updated
// optimizer slices is queued unit by unit on the gradient thread (idle then) at the next step's start, in the
// order the step first gathers them, and each unit's first gather waits for its refresh, so forward runs the
// units refreshed first while the rest are refreshed and the parameter thread's gathers run beside them. Each step still moves exactly one exchange and one refresh (step 0 runs
// the initial refresh), and parameter state read between steps (replicated_state, the parameter
// gathers) refreshes first.
//
// Pipeline stages (pp > 1): neighbouring actions of the stage's schedule share a gather (scheduler.pp_reuse) and
// the cool-down's runs of backwards share a reduce-scatter (scheduler.rs_merge); StageReuse decides both, for this
// engine, its background thread's gather order and the plan alike.
//
// The collectives run inline on the calling thread (scheduler.async = false, the paper's Table 3) or on
// two background threads (async_comm.hpp). The gradient path is two functions, reduce_scatter_grad() per
// micro-batch and combine_gradients() at the step end. Deterministic mode (train.deterministic,
// docs/deterministic.md) gives them int64 fixed-point blocks and shards: each micro-batch's final fp32 block
// is converted on the compute thread, the reduce-scatters (inline or on the gradient thread) and the step-end
// exchange sum int64 exactly, and the optimizer slice is converted back once.
//
// scheduler.tied_split (tied_rows.hpp): in the step's last micro-batch the tied table's gradient counts as final
// after the head's backward (its reduce-scatter and exchange go then, like any unit's); the embedding lookup of that
// micro-batch writes into a separate buffer whose rows are sent to the ranks whose optimizer slices hold them
// (rows_alltoall) or all-gathered over the ranks (rows_allgather) after its backward and added into the optimizer
// slice, behind the table's exchange (async: on the gradient thread; inline: at the step end).
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/common/checkpoint_state.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/common/gather_scatter.hpp"
#include "hzp/schedulers/common/model_runs.hpp"
#include "hzp/schedulers/common/nested_groups.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/common/shared_stage_grads.hpp"
#include "hzp/schedulers/common/distinct_norm.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/common/state_dump.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/asynchzp.hpp"
#include "hzp/schedulers/step/parameter_engine.hpp"
#include "hzp/schedulers/step/stage_reuse.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "asynchzp/async_comm.hpp"
#include "asynchzp/asynchzp_segments.hpp"
#include "asynchzp/tied_rows.hpp"

namespace hzp::schedulers {
namespace {

using workloads::ParamLayout;
using StepEnd = SchedulerOptions::StepEnd;

// The scheduler is its own parameter engine; the step's loop is the shared StepDriver's.
class AsyncHzp final : public AsyncHzpScheduler, private ParameterEngine {
 public:
  explicit AsyncHzp(const SchedulerArgs& args);
  ~AsyncHzp() override;
  AsyncHzpStats async_stats() const override;
  std::string_view name() const override { return "asynchzp"; }
  StepStats step(const StepBatch& batch) override { return driver_->step(batch, *this); }
  ReplicaDigests replicated_state() const override;
  std::vector<float> gather_gradient() override;
  std::vector<float> gather_master_params() override;
  std::vector<float> gather_working_params() override;
  std::vector<float> gather_moment(bool second) override {
    return gather_opt_slices(second ? opt_->v() : opt_->m());
  }
  void visit_state(StateVisitor& visitor) override {
    visit_gathered_state(*this, model_->layout(), train_.precision, world_->rank() == 0, nullptr, visitor);
  }
  RingPool* ring_pool() noexcept override { return async_ ? async_->pool() : nullptr; }
  void checkpoint(StateArchive& archive) override;

 private:
  // Buffers on the engine's device (the host, or one GPU: engine_memory.hpp), zeroed on the compute stream.
  TensorView at(const Allocation& a, DType t, std::int64_t offset, std::int64_t n) const {
    return view_at(a, t, offset, n, alloc_->device());
  }
  Allocation zeroed(std::int64_t n, DType t, AllocationTag tag) const { return zeroed_on(*alloc_, n, t, tag, stream_); }
  bool on_gpu() const { return stream_.device().is_cuda(); }
  TensorView param_shard(int s) const { return at(params_, pdt_, l3().slice_offset(s), l3().slice_numel(s)); }
  TensorView opt_piece(int s) const {
    return at(params_, pdt_, l3().slice_offset(s) + (o_ % (g_.z1() / g_.z3())) * l1().slice_numel(s),
              l1().slice_numel(s));
  }
  // Gradient element type: fp32, or the int64 fixed-point sum in deterministic mode.
  DType gdt() const { return fixed_ ? DType::i64 : DType::f32; }
  TensorView grad_shard(int s) const { return at(grads_, gdt(), l2().slice_offset(s), l2().slice_numel(s)); }
  // Deterministic mode: the optimizer slice's fixed-point gradient as fp32 (padding zero; tag comm).
  Allocation converted_opt_grad() const;
  // Every rank's optimizer slice (fp32, l1 slice order), all-gathered uncounted, as a flat [N] vector.
  std::vector<float> gather_opt_slices(ConstTensorView mine);
  const ShardLayout& l3() const { return seg_->l3; }
  const ShardLayout& l2() const { return seg_->l2; }
  const ShardLayout& l1() const { return seg_->l1; }

  // --- the collectives (inline here; forwarded to the background threads when async) -----------------
  // The full parameter block of unit u for the next consumer, gathered from the z3 shards.
  Block gather_unit(int u);
  // The final gradient of unit u for this micro-batch (block of the unit's padded size) into the shard.
  void reduce_scatter_grad(int u, const Block& block, bool accumulate);
  // The step-end groups, on the compute thread (inline) or on the background threads' duplicates.
  struct EndGroups {
    std::unique_ptr<coll::Communicator> replica_dup, opt_replica_dup, refresh_dup;  // async only
    coll::Communicator *replica = nullptr, *opt_replica = nullptr, *refresh = nullptr;
    std::unique_ptr<GatherScatter> replica_rs, opt_ag, refresh_ag;
    // Where the exchange and the refresh run: the compute stream (inline), or the gradient lane (async: the
    // exchange behind each unit's last reduce-scatter, the refresh at the next step's start, AsyncComm).
    StreamRef grad_stream = StreamRef::host();
    StreamScratch* grad_scratch = nullptr;  // the gradient lane's keeper (async on a GPU), else none
    coll::StreamOrderedRequests replica_requests;  // the all-reduce step end's, completed once per step
    // Completes what the exchange and the refresh ordered on grad_stream; on its thread.
    void complete() {
      replica_requests.complete();
      refresh_ag->complete();
      if (replica_rs) replica_rs->complete();
      if (opt_ag) opt_ag->complete();
    }
  };
  void make_end_groups(EndGroups& e, bool duplicate);
  // Gradient shards summed over the replicas; returns the optimizer slice's gradient ([l1 slice_total]).
  ConstTensorView combine_gradients(EndGroups& e);
  // The same for segments [first, end) only (their slices are contiguous in every layout).
  void combine_segments(EndGroups& e, int first, int end);
  ConstTensorView opt_grad_view() const;
  // The updated optimizer slices all-gathered back into the parameter shards (all, or unit u's segments).
  void refresh_params(EndGroups& e);
  void refresh_unit(EndGroups& e, int u);
  // Async: the refresh still due from the last step, run now (state read between steps).
  void ensure_refreshed();
  // Inline: every unit's refresh on the compute stream (a wait where it is issued, on a GPU).
  void refresh_inline();
  // On a GPU, once the norm has synchronised the step: the kept requests completed.
  void settle_device_step();
  // Async: waits for the queued reduce-scatters and the per-unit gradient exchanges.
  void drain_gradient_thread();
  // A block's gradient for this micro-batch is final on this rank: converted (deterministic mode), kept for the
  // next action (rs_merge), or reduce-scattered and, in the last micro-batch, exchanged (async).
  void grad_final(int b, const Action& a);
  // scheduler.tied_split: the last micro-batch's lookup rows of every rank added into the optimizer slice's
  // gradient (after the table's exchange wrote it), on the thread that runs the exchange.
  void add_tied_rows(const TiedRows::Message& mine);
  bool splits_table(const Action& a) const { return tied_ && a.micro_batch + 1 == micro_batches_; }

  workloads::UnitParams params_of(int u) const;
  // Frees the parameter blocks unit u's current call was the last use of (StageReuse's decision).
  void release_params(int u);

  // --- ParameterEngine: each unit gathered in its z3 group before forward and again before backward (by
  // the parameter thread when async), its final gradient reduce-scattered in z2 per micro-batch, the step
  // end exchanged per unit behind the last reduce-scatter (async) or at the end (inline) -----------------
  void begin_attempt(std::int64_t step, const std::vector<Action>& actions) override;
  workloads::UnitParams unit_params(int u, const Action& a) override;
  void forward_done(int u, const Action&) override { release_params(u); }
  workloads::UnitGrads unit_grads(int u, const Action& a) override;
  void backward_done(int u, const Action& a) override;
  void attempt_voided() override;
  void micro_batch_tokens(int micro_batch, std::span<const std::int32_t> inputs) override {
    if (tied_ && micro_batch + 1 == micro_batches_) tied_->set_tokens(inputs);
  }
  FixedPointGrads* fixed_point() noexcept override { return fixed_.get(); }
  coll::Communicator& scalars() noexcept override { return *scalars_comm_; }
  // Context parallelism: every rank of the weights' group converts gradients, not only the scalars' ranks.
  coll::Communicator& verdict_group() noexcept override { return verdict_comm_ ? *verdict_comm_ : *scalars_comm_; }
  StepFinish finish_step(std::int64_t step, double lr) override;
  std::vector<std::pair<double, double>> background_waits() override {
    return async_ ? async_->background_waits() : std::vector<std::pair<double, double>>{};
  }

  const workloads::Workload* model_;
  workloads::TrainConfig train_;
  SchedulerOptions opts_;
  CachingAllocator* alloc_;
  std::unique_ptr<ProcessGroups> own_groups_;  // when the caller handed none (SchedulerArgs::groups)
  coll::Communicator* world_;                   // the ranks holding the weights: data × context (the z-groups' world)
  coll::Communicator* stages_ = nullptr;        // the pipeline group (nullptr without stages)
  DType pdt_;
  NestedGroups g_;
  int o_ = 0;
  std::unique_ptr<coll::Communicator> z3_comm_, z2_comm_, z1_comm_, replica_comm_, opt_replica_comm_, refresh_comm_,
      scalars_comm_, verdict_comm_, debug_comm_;
  std::unique_ptr<Segments> seg_;
  std::unique_ptr<GatherScatter> gather_, rs_;
  EndGroups end_inline_, end_bg_;
  Allocation params_;    // this rank's z3 shard (param dtype, tag param)
  Allocation grads_;     // this rank's z2 gradient slice (fp32, tag grad; int64 in deterministic mode)
  Allocation opt_grad_;  // the optimizer slice's gradient when it is not a view of grads_ (as grads_, tag comm)
  std::unique_ptr<FixedPointGrads> fixed_;  // deterministic mode only
  std::unique_ptr<ShardedOptimizer> opt_;
  StreamRef stream_ = StreamRef::host();  // the compute stream: the host's, or a CUDA stream
  std::unique_ptr<AsyncComm> async_;  // before the blocks: they may hold its ring slots
  bool refresh_due_ = false;          // async: the shards do not yet hold the last update (or the initial one)
  std::vector<Ticket> exchanges_;     // async: this step's per-unit gradient exchanges
  std::vector<Block> gathered_;       // full parameter blocks held now, per unit
  std::vector<Block> grad_blocks_;    // full gradient blocks being written (or merged across a run), per unit
  // This attempt's schedule: which gathers and reduce-scatters neighbouring actions share (pp > 1 only).
  bool staged_ = false;
  std::unique_ptr<StageReuse> reuse_;
  std::vector<std::vector<int>> release_after_;  // per unit: the blocks its current call frees when done
  std::vector<Block> fixed_runs_;                // deterministic mode, rs_merge: a run's int64 sum, per unit
  std::vector<bool> shard_written_;              // per unit: reduce-scattered into the shard this step
  std::unique_ptr<SharedStageGrads> shared_;  // pipeline stages: the tied table's gradient over its two stages
  std::unique_ptr<DistinctNorm> norm_;         // over z1 (and the stages): the units this stage runs
  std::unique_ptr<StepDriver> driver_;
  int micro_batches_ = 0;  // the rank's micro-batches per step
  // scheduler.tied_split: the rows' group (the weights' group: data × context), the rows, and inline the message
  // due at the step end.
  std::unique_ptr<coll::Communicator> tied_rows_comm_;
  std::unique_ptr<TiedRows> tied_;
  std::optional<TiedRows::Message> inline_rows_;
};

NestedGroups validated_groups(const SchedulerArgs& args) {
  const int w = args.world->size();
  validate_data_parallel("asynchzp", args, 0, asynchzp_parallel_dims(args.options, w).dp());
  return nested_groups_from(args.options, w);
}

AsyncHzp::AsyncHzp(const SchedulerArgs& args)
    : model_(args.model),
      train_(args.train),
      opts_(args.options),
      alloc_(args.allocator),
      pdt_(workloads::param_dtype(args.train.precision)),
      g_(validated_groups(args)) {
  stream_ = args.stream;
  // The mesh shards over z1 (its dp_shard axis times cp) and replicates over W / z1; the nested z2 and z3 groups
  // and the step end's groups are cut from the data × context group (context-parallel ranks hold the same weights
  // and each contributes its tokens' share of a gradient), ordered by NestedGroups' slice indices. cp is the
  // innermost axis, so contiguous runs of cp ranks are the cp groups and z3 = cp gathers over exactly them.
  const ProcessGroups& groups = scheduler_groups("asynchzp", args, own_groups_);
  check_context_parallel_model("asynchzp", groups, *model_);
  world_ = &groups.data_context();
  stages_ = groups.pipeline();
  const int r = world_->rank(), w = world_->size();
  // Slots as functions of any rank, so that a phantom world (docs/phantom.md) can build the groups too.
  const NestedGroups& g = g_;
  auto split = [&](GroupSlot (NestedGroups::*slot)(int) const noexcept, const char* name) {
    return world_->split_by([&g, slot](int q) { return (g.*slot)(q); }, name);
  };
  z3_comm_ = split(&NestedGroups::z3_group, "z3");
  z2_comm_ = split(&NestedGroups::z2_group, "z2");
  // The norm's group: z1's ranks, and with pipeline stages the same place on every stage (whose slices together
  // hold the model once; each stage counts only the units it runs, so the tied table's second copy is left out).
  // Split over the world by a pure slot: world rank q's stage and its place in its stage's data × context group.
  if (groups.dims().pp > 1) {
    const coll::RankMesh& mesh = groups.mesh();
    z1_comm_ = groups.world().split_by(
        [&g, &mesh](int q) {
          const std::vector<int> dc = data_context_ranks(mesh, q);
          const int at = static_cast<int>(std::find(dc.begin(), dc.end(), q) - dc.begin());
          const GroupSlot z1 = g.z1_group(at);
          return GroupSlot{z1.color, mesh.position(kAxisPipeline, q) * g.z1() + z1.key};
        },
        "z1");
  } else {
    z1_comm_ = split(&NestedGroups::z1_group, "z1");
  }
  replica_comm_ = split(&NestedGroups::replica_group, "replica");
  opt_replica_comm_ = split(&NestedGroups::opt_replica_group, "opt_replica");
  refresh_comm_ = split(&NestedGroups::refresh_group, "refresh");
  // The step's scalars (the loss, the fixed-point losses) over the ranks with distinct micro-batches: the
  // driver has already summed each micro-batch's loss shares over cp.
  scalars_comm_ = groups.data_parallel().duplicate("scalars");
  if (verdict_over_world(groups.dims()) && train_.deterministic) verdict_comm_ = groups.world().duplicate("verdict");
  debug_comm_ = world_->duplicate("debug", /*share_counters=*/false);
  o_ = g_.opt_index(r);

  const ParamLayout& layout = model_->layout();
  // scheduler.tied_split: every rank's last micro-batch reaches the table in two summands (the head's part and the
  // rows), one more per rank of the weights' group (data × context: under cp each rank's share of a micro-batch is
  // already its own summand) for the fixed-point limit.
  std::optional<TiedTable> tied;
  if (opts_.tied_split != TiedSplit::off) tied = tied_split_table(layout, groups.dims(), on_gpu(), opts_.tied_split);
  if (train_.deterministic)
    fixed_ = std::make_unique<FixedPointGrads>(
        layout, gradient_summands(train_, groups.dims()) + (tied ? w : 0), args.fixed_point);
  // The reduce-scatter step end cuts every gradient slice into R pieces of W-th size: pad to W.
  const int pad = opts_.step_end == StepEnd::reduce_scatter ? w : g_.z1();
  seg_ = std::make_unique<Segments>(layout, opts_.launch, g_, pad);
  gather_ = std::make_unique<GatherScatter>(*z3_comm_, l3(), *alloc_, stream_);
  rs_ = std::make_unique<GatherScatter>(*z2_comm_, l2(), *alloc_, stream_);
  make_end_groups(end_inline_, false);
  const int segs = l3().num_segments();
  if (tied) {
    tied_rows_comm_ = world_->duplicate("tied_rows");
    tied_ = std::make_unique<TiedRows>(*tied, train_.micro_batch_size * model_->local_seq_len(), *tied_rows_comm_,
                                       *alloc_, opts_.tied_split,
                                       tied_owners(*tied, layout.unit_offset(tied->unit), *seg_, g_));
  }

  params_ = zeroed(l3().slice_total(), pdt_, AllocationTag::param);
  grads_ = zeroed(l2().slice_total(), gdt(), AllocationTag::grad);
  if (g_.z1() > g_.z2() || opts_.step_end == StepEnd::reduce_scatter)
    opt_grad_ = zeroed(l1().slice_total(), gdt(), AllocationTag::comm);

  std::vector<TensorView> pieces;
  for (int s = 0; s < segs; ++s) pieces.push_back(opt_piece(s));
  opt_ = std::make_unique<ShardedOptimizer>(train_, std::move(pieces), *alloc_,
                                            slice_initializer(*model_, l1(), o_, train_.seed), stream_);
  // The rest of the shard comes from the other optimizer slices inside it: now, or (async) unit by unit
  // before step 0's gathers, as every later step's refresh.
  if (opts_.async)
    refresh_due_ = true;
  else
    refresh_inline();

  gathered_.resize(static_cast<std::size_t>(layout.num_units()));
  grad_blocks_.resize(static_cast<std::size_t>(layout.num_units()));
  release_after_.resize(static_cast<std::size_t>(layout.num_units()));
  fixed_runs_.resize(static_cast<std::size_t>(layout.num_units()));
  staged_ = groups.dims().pp > 1;
  if (opts_.async) async_ = std::make_unique<AsyncComm>(AsyncComm::Setup{
                         .layout = &layout, .seg = seg_.get(), .z3 = z3_comm_.get(), .z2 = z2_comm_.get(),
                         .alloc = alloc_, .param_dtype = pdt_, .prefetch = opts_.prefetch, .pool_mb = opts_.pool_mb,
                         .fallback = opts_.pool_fallback, .compute = stream_});
  if (async_) make_end_groups(end_bg_, true);
  // Pipeline stages: the tied table's two stages add their gradient slices before the norm (SharedStageGrads,
  // collective over the world), and the norm counts the units this stage runs. Without stages the whole slice is
  // summed as one, as zero3 and hsdp sum theirs (the same bits).
  shared_ = std::make_unique<SharedStageGrads>(groups, layout);
  std::optional<std::vector<SliceRange>> counted;
  if (groups.dims().pp > 1) {
    counted.emplace();
    for (int u = 0; u < layout.num_units(); ++u) {
      const std::int64_t begin = l1().slice_offset(seg_->first(u)), end = l1().slice_offset(seg_->end(u));
      if (layout.unit(u).runs && end > begin) counted->push_back({begin, end - begin});
    }
  }
  norm_ = std::make_unique<DistinctNorm>(std::move(counted), z1_comm_.get());
  const coll::Communicator& dp = groups.data_parallel();
  driver_ = std::make_unique<StepDriver>("asynchzp", *model_, train_, *alloc_, dp.rank(), dp.size(),
                                         step_pipeline(opts_, groups, layout.num_units()), groups.context(), stream_);
  driver_->set_unit_sleep(UnitSleep(opts_));
  micro_batches_ = static_cast<int>(train_.micro_batches() / dp.size());
}

// The z1 optimizer slice as flat runs of the whole model (replica 0 of each slice writes); on load the parameter
// shards are refreshed from the restored slices as the constructor refreshes them from the initial ones (now, or
// before step's gathers). Context-parallel ranks are part of the z-groups (each holds its own slice, no copy), so
// they write like any other slice. A pipeline stage's layout holds only its units, each tensor at its place in the
// whole model (global_offset): model_runs maps the slice there, and a unit the stage does not run (the last stage's
// copy of a tied table, updated identically from the shared gradient) is written by the stage that runs it.
void AsyncHzp::checkpoint(StateArchive& archive) {
  const TensorWriter writes = [load = archive.loading()](const workloads::Unit& unit, const workloads::ParamTensor&) {
    return load || unit.runs;
  };
  opt_->checkpoint(archive, model_runs(model_->layout(), l1().flat_runs(o_), writes), opt_replica_comm_->rank() == 0);
  if (archive.loading()) {
    if (opts_.async)
      refresh_due_ = true;
    else
      refresh_inline();
    driver_->resume_at(archive.next_step());
  }
  checkpoint_side_state(archive, *model_, fixed_.get(), stages_);
}

AsyncHzpStats AsyncHzp::async_stats() const {
  AsyncHzpStats st = async_ ? async_->stats() : AsyncHzpStats{};
  // The compute stream's stalls are the step driver's (every engine's): at issue, the NCCL communicator's waits
  // on the collectives this thread issues on it; at use, AsyncComm's waits on the lanes.
  const StallSplit& d = driver_->device_stalls();
  st.device_wait_s = d.total();
  st.device_waits_at_use = d.at_use;
  st.device_waits_at_issue = d.at_issue;
  return st;
}

// A step leaves nothing queued on the background threads (it waits for its exchanges and refreshes), so
// the threads stop with no collective half-issued.
AsyncHzp::~AsyncHzp() = default;

void AsyncHzp::make_end_groups(EndGroups& e, bool duplicate) {
  e.grad_stream = duplicate ? async_->grad_lane() : stream_;
  e.grad_scratch = duplicate ? &async_->grad_scratch() : nullptr;
  e.replica_requests = coll::StreamOrderedRequests(e.grad_stream);
  e.replica = replica_comm_.get();
  e.opt_replica = opt_replica_comm_.get();
  e.refresh = refresh_comm_.get();
  if (duplicate) {
    e.replica_dup = replica_comm_->duplicate("replica");
    e.opt_replica_dup = opt_replica_comm_->duplicate("opt_replica");
    e.refresh_dup = refresh_comm_->duplicate("refresh");
    e.replica = e.replica_dup.get();
    e.opt_replica = e.opt_replica_dup.get();
    e.refresh = e.refresh_dup.get();
  }
  e.refresh_ag = std::make_unique<GatherScatter>(*e.refresh, seg_->in_shard, *alloc_, e.grad_stream);
  e.refresh_ag->set_scratch_keeper(e.grad_scratch);
  if (opts_.step_end == StepEnd::reduce_scatter) {
    e.replica_rs = std::make_unique<GatherScatter>(*e.replica, seg_->in_grad_slice, *alloc_, e.grad_stream);
    e.opt_ag = std::make_unique<GatherScatter>(*e.opt_replica, seg_->in_opt_slice, *alloc_, e.grad_stream);
    e.replica_rs->set_scratch_keeper(e.grad_scratch);
    e.opt_ag->set_scratch_keeper(e.grad_scratch);
  }
}

void AsyncHzp::refresh_inline() { refresh_params(end_inline_); }

void AsyncHzp::ensure_refreshed() {
  if (!refresh_due_) return;
  refresh_due_ = false;
  async_->lanes_after_compute();  // the refresh reads the optimizer slices the last update wrote
  async_->wait(async_->on_grad_thread([this] { refresh_params(end_bg_); }), "the step-end parameter all-gather");
  async_->compute_after_grad_lane();  // state readers read the shards on the compute stream
}

void AsyncHzp::drain_gradient_thread() {
  async_->finish_reduce_scatters();
  std::vector<Ticket> pending;
  pending.swap(exchanges_);
  for (const Ticket& t : pending) async_->wait(t, "the step-end gradient exchange");
  // The thread is idle: the optimizer, on the compute stream, reads what its lane wrote.
  async_->compute_after_grad_lane();
}

ConstTensorView AsyncHzp::opt_grad_view() const {
  return opt_grad_ ? at(opt_grad_, gdt(), 0, l1().slice_total()) : at(grads_, gdt(), 0, l1().slice_total());
}

Block AsyncHzp::gather_unit(int u) {
  Block block(
      alloc_->allocate(static_cast<std::size_t>(seg_->unit_block_numel(u)) * dtype_size(pdt_), AllocationTag::comm));
  // Inline on a GPU the compute stream waits for the gather where it is issued (the paper's Fig. 3 left; the step
  // driver's stall clock times that wait).
  for (int s = seg_->first(u); s < seg_->end(u); ++s)
    seg_->gather_segment(*gather_, s, param_shard(s), static_cast<std::byte*>(block.data()), pdt_);
  return block;
}

void AsyncHzp::reduce_scatter_grad(int u, const Block& block, bool accumulate) {
  for (int s = seg_->first(u); s < seg_->end(u); ++s)
    seg_->reduce_scatter_segment(*rs_, s, block.data(), grad_shard(s), accumulate, *alloc_);
}

ConstTensorView AsyncHzp::combine_gradients(EndGroups& e) {
  combine_segments(e, 0, l2().num_segments());
  return opt_grad_ ? at(opt_grad_, gdt(), 0, l1().slice_total()) : at(grads_, gdt(), 0, l2().slice_total());
}

void AsyncHzp::combine_segments(EndGroups& e, int first, int end) {
  const Device dev = alloc_->device();
  if (opts_.step_end == StepEnd::all_reduce) {
    // One all-reduce of the segments' gradient slice across the R replicas (the paper's "DZP Allreduce").
    const std::int64_t begin = l2().slice_offset(first), n = l2().slice_offset(end) - begin;
    if (e.replica->size() > 1 && n > 0)
      e.replica_requests.settle(e.replica->start_all_reduce(at(grads_, gdt(), begin, n), coll::ReduceOp::sum, e.grad_stream));
    if (!opt_grad_) return;
    const int f1 = g_.z1() / g_.z2();
    for (int s = first; s < end; ++s)
      copy_bytes(at(opt_grad_, gdt(), l1().slice_offset(s), 0).data(), dev,
                 at(grads_, gdt(), l2().slice_offset(s) + (o_ % f1) * l1().slice_numel(s), 0).data(), dev,
                 static_cast<std::size_t>(l1().slice_numel(s)) * dtype_size(gdt()), e.grad_stream);
    return;
  }
  // Reduce-scatter over the replicas to W-th pieces, then all-gather the pieces of the optimizer slice
  // among the Q ranks that hold it.
  const ShardLayout& in = seg_->in_grad_slice;
  const std::int64_t base = in.slice_offset(first);
  Allocation pieces = zeroed_on(*alloc_, in.slice_offset(end) - base, gdt(), AllocationTag::comm, e.grad_stream);
  for (int s = first; s < end; ++s) {
    const TensorView piece = at(pieces, gdt(), in.slice_offset(s) - base, in.slice_numel(s));
    if (e.replica->size() > 1)
      e.replica_rs->reduce_scatter(s, grad_shard(s), piece, false);
    else
      copy_bytes(piece.data(), dev, grad_shard(s).data(), dev, piece.bytes(), e.grad_stream);
    const TensorView out = at(opt_grad_, gdt(), l1().slice_offset(s), l1().slice_numel(s));
    if (e.opt_replica->size() > 1)
      e.opt_ag->gather_into(s, piece, out);
    else
      copy_bytes(out.data(), dev, piece.data(), dev, piece.bytes(), e.grad_stream);
  }
  e.replica_rs->retire(std::move(pieces));  // through the lane's keeper when the exchange runs on a lane
}

void AsyncHzp::refresh_params(EndGroups& e) {
  for (int u = 0; u < model_->layout().num_units(); ++u) refresh_unit(e, u);  // the units' segments are all
}

void AsyncHzp::refresh_unit(EndGroups& e, int u) {
  if (e.refresh->size() == 1) return;
  for (int s = seg_->first(u); s < seg_->end(u); ++s) e.refresh_ag->gather_into(s, opt_piece(s), param_shard(s));
}

workloads::UnitParams AsyncHzp::params_of(int u) const {
  workloads::UnitParams p;
  for (int b : model_->layout().param_blocks(u))
    p.set(b, ConstTensorView(gathered_[b].data(), Shape{model_->layout().unit_numel(b)}, pdt_, alloc_->device()));
  return p;
}

workloads::UnitParams AsyncHzp::unit_params(int u, const Action& a) {
  const FirstUseGathers::Call c = reuse_->call(a, u);
  for (int b : c.gather) {
    HZP_CHECK(!gathered_[b], "asynchzp: unit ", b, "'s parameters are gathered again while held");
    gathered_[b] = async_ ? async_->next_gathered(b) : gather_unit(b);
  }
  release_after_[static_cast<std::size_t>(u)] = c.release;
  return params_of(u);
}

void AsyncHzp::release_params(int u) {
  for (int b : release_after_[static_cast<std::size_t>(u)]) gathered_[b].reset();
  release_after_[static_cast<std::size_t>(u)].clear();
}

void AsyncHzp::begin_attempt(std::int64_t, const std::vector<Action>& actions) {
  const bool reuse = staged_ && opts_.pp_reuse, merge = staged_ && opts_.rs_merge;
  reuse_ = std::make_unique<StageReuse>(model_->layout(), actions, reuse, merge);
  shard_written_.assign(static_cast<std::size_t>(model_->layout().num_units()), false);
  if (!async_) return;
  std::function<void(int)> refresh;
  if (refresh_due_) refresh = [this](int u) { refresh_unit(end_bg_, u); };
  refresh_due_ = false;
  async_->begin_step(actions, reuse, at(params_, pdt_, 0, l3().slice_total()), at(grads_, gdt(), 0, l2().slice_total()),
                     std::move(refresh));
}

workloads::UnitGrads AsyncHzp::unit_grads(int u, const Action& a) {
  const ParamLayout& layout = model_->layout();
  workloads::UnitGrads gr;
  for (int b : layout.grad_blocks(u)) {
    if (splits_table(a) && u == tied_->table().unit && b == u) {  // the lookup's rows, apart from the dense part
      gr.set(b, tied_->lookup_grad(), /*accumulate=*/true);
      continue;
    }
    const bool first_writer = u == layout.first_grad_writer(b);
    // rs_merge in fp32: the block the previous backward kept goes on accumulating (deterministic mode sums the
    // run in int64 instead, fixed_runs_, so each micro-batch still converts its own fp32 block).
    const bool continues = first_writer && !fixed_ && reuse_->grad_continues(a, b);
    if (first_writer && !continues) {
      // A block kept past this action must not hold a ring slot (the ring is sized for blocks in flight).
      const bool kept = !fixed_ && reuse_->grad_held_after(a, b);
      grad_blocks_[b] = async_ && !kept ? async_->grad_block(b)
                                        : Block(seg_->new_grad_block(b, *alloc_, DType::f32, stream_));
    }
    gr.set(b, TensorView(grad_blocks_[b].data(), Shape{layout.unit_numel(b)}, DType::f32, alloc_->device()),
           !first_writer || continues);
  }
  return gr;
}

void AsyncHzp::backward_done(int u, const Action& a) {
  const ParamLayout& layout = model_->layout();
  for (int b : layout.grads_final_after(u))
    if (!splits_table(a) || b != tied_->table().unit) grad_final(b, a);
  if (splits_table(a)) {
    const TiedTable& t = tied_->table();
    if (u == t.head) grad_final(t.unit, a);  // the dense part: every head contribution, earlier lookups
    if (u == t.unit) {
      TiedRows::Message rows = tied_->take(fixed_.get());
      if (async_)  // behind the table's exchange on the gradient thread
        exchanges_.push_back(async_->on_grad_thread([this, rows = std::move(rows)] { add_tied_rows(rows); }));
      else
        inline_rows_ = std::move(rows);
    }
  }
  release_params(u);
}

void AsyncHzp::grad_final(int b, const Action& a) {
  const ParamLayout& layout = model_->layout();
  const bool last = a.micro_batch + 1 == micro_batches_;
  const bool kept = reuse_->grad_held_after(a, b), continues = reuse_->grad_continues(a, b);
  Block block = std::move(grad_blocks_[b]);
  if (fixed_) {
    // On the compute thread: the fp32 block becomes an int64 block (zero padding), or is added into the run's
    // int64 sum (exact), and the fp32 one is freed.
    Block q = continues ? std::move(fixed_runs_[b]) : Block(seg_->new_grad_block(b, *alloc_, DType::i64));
    const std::int64_t n = layout.unit_numel(b);
    fixed_->to_fixed(b, ConstTensorView(block.data(), Shape{n}, DType::f32), TensorView(q.data(), Shape{n}, DType::i64),
                     continues);
    block = std::move(q);
  }
  if (kept) {  // rs_merge: the next action's backward adds to this block; reduce-scattered at the run's end
    (fixed_ ? fixed_runs_[b] : grad_blocks_[b]) = std::move(block);
    return;
  }
  const bool accumulate = shard_written_[static_cast<std::size_t>(b)];
  shard_written_[static_cast<std::size_t>(b)] = true;
  if (async_) {
    async_->reduce_scatter(b, std::move(block), accumulate);
    // The unit's gradient is complete on this rank: its exchange across the replicas follows on the
    // gradient thread while backward goes on below.
    if (last)
      exchanges_.push_back(async_->on_grad_thread([this, b] { combine_segments(end_bg_, seg_->first(b), seg_->end(b)); }));
  } else {
    reduce_scatter_grad(b, block, accumulate);
  }
  grad_blocks_[b].reset();
}

void AsyncHzp::add_tied_rows(const TiedRows::Message& mine) {
  const TiedTable& t = tied_->table();
  const std::int64_t base = model_->layout().unit_offset(t.unit), vb = static_cast<std::int64_t>(dtype_size(gdt()));
  auto* grad = static_cast<std::byte*>(const_cast<void*>(opt_grad_view().data()));
  tied_->exchange(mine, [&](std::int64_t first, const std::byte* values) {
    // The row's elements that fall in this rank's optimizer slice of each of the table's segments.
    for (int s = seg_->first(t.unit); s < seg_->end(t.unit); ++s) {
      const ShardLayout::Range r = l1().valid_range(s, o_);
      const std::int64_t seg_first = l1().global_offset(s) - base;  // the segment's first element in the table
      const std::int64_t lo = std::max(first, seg_first + r.begin), hi = std::min(first + t.width, seg_first + r.begin + r.count);
      for (std::int64_t e = lo; e < hi; ++e) {
        std::byte* at = grad + (l1().slice_offset(s) + e - seg_first - r.begin) * vb;
        const std::byte* v = values + (e - first) * vb;
        if (fixed_)
          *reinterpret_cast<std::int64_t*>(at) += *reinterpret_cast<const std::int64_t*>(v);
        else
          *reinterpret_cast<float*>(at) += *reinterpret_cast<const float*>(v);
      }
    }
  });
}

void AsyncHzp::attempt_voided() {
  // A void attempt's queued collectives finish before the rerun restarts the schedule (its exchanges summed
  // bounded values: an element over the fixed-point limit is stored as 0).
  if (!async_) return;
  drain_gradient_thread();
  async_->finish_refresh();
}

StepFinish AsyncHzp::finish_step(std::int64_t step, double lr) {
  ConstTensorView gslice;
  if (async_) {
    // The per-unit exchanges were queued behind each unit's last reduce-scatter; every unit's refresh ran
    // before its first gather (finish_refresh runs any unit the schedule did not gather), so the optimizer
    // below may write the shards.
    drain_gradient_thread();
    async_->finish_refresh();
    gslice = opt_grad_view();
  } else {
    gslice = combine_gradients(end_inline_);
    if (inline_rows_) {
      add_tied_rows(*inline_rows_);
      inline_rows_.reset();
    }
  }
  // The tied table's second stage adds its gradient slice (int64 in deterministic mode: exact).
  shared_->all_reduce([&](int u) {
    const std::int64_t begin = l1().slice_offset(seg_->first(u));
    auto* base = static_cast<std::byte*>(const_cast<void*>(gslice.data()));
    return TensorView(base + begin * static_cast<std::int64_t>(dtype_size(gdt())),
                      Shape{l1().slice_offset(seg_->end(u)) - begin}, gdt(), alloc_->device());
  }, stream_);
  Allocation g32;
  if (fixed_) {
    g32 = converted_opt_grad();
    gslice = ConstTensorView(g32.data(), Shape{l1().slice_total()}, DType::f32);
  }
  const double sq = norm_->sum_squares(gslice, *opt_, fixed_.get());
  if (on_gpu()) settle_device_step();
  const Stopwatch update;
  StepFinish end;
  end.update = opt_->step(gslice, sq, step, lr);
  end.optimizer_seconds = update.wall();
  // Async: the shards are refreshed unit by unit at the next step's gathers (or by ensure_refreshed()).
  if (async_) {
    refresh_due_ = true;
  } else {
    refresh_inline();  // its requests are completed with the next step's (settle_device_step)
  }
  return end;
}

void AsyncHzp::settle_device_step() {
  // The compute stream has passed every wait of the step so far (the host waited for it): the collectives'
  // requests can be completed (their counters recorded, their deadlines checked).
  stream_.synchronize();
  if (async_) {
    async_->complete_requests({}, [this] { end_bg_.complete(); });
  } else {
    gather_->complete();
    rs_->complete();
    end_inline_.complete();
  }
}

ReplicaDigests AsyncHzp::replicated_state() const {
  if (async_) const_cast<AsyncHzp*>(this)->ensure_refreshed();
  // Ranks with the same optimizer slice hold identical optimizer state and (after the refresh) identical
  // parameter shards; the gradient slice is a replica only after an all-reduce step end.
  ReplicaDigests d;
  d.replica_key = o_;
  auto add = [&](const char* name, const void* p, std::size_t bytes) { d.digests.emplace_back(name, state_digest(p, bytes)); };
  auto add_device = [&](const char* name, const void* p, std::size_t bytes) {
    const std::vector<std::byte> host = host_copy(
        ConstTensorView(p, Shape{static_cast<std::int64_t>(bytes)}, DType::u8, alloc_->device()), stream_);
    add(name, host.data(), bytes);
  };
  add_device("param", params_.data(), static_cast<std::size_t>(l3().slice_total()) * dtype_size(pdt_));
  if (opts_.step_end == StepEnd::all_reduce)
    add_device("grad", grads_.data(), static_cast<std::size_t>(l2().slice_total()) * dtype_size(gdt()));
  if (opt_->has_master()) add_device("master", opt_->master().data(), opt_->master().bytes());
  add_device("m", opt_->m().data(), opt_->m().bytes());
  add_device("v", opt_->v().data(), opt_->v().bytes());
  return d;
}

Allocation AsyncHzp::converted_opt_grad() const {
  Allocation out = zeroed(l1().slice_total(), DType::f32, AllocationTag::comm);
  const ConstTensorView q = opt_grad_view();
  for (int s = 0; s < l1().num_segments(); ++s) {
    const ShardLayout::Range r = l1().valid_range(s, o_);
    if (r.count > 0)
      fixed_->to_float_at(l1().global_offset(s) + r.begin,
                          ConstTensorView(q.as<const std::int64_t>() + l1().slice_offset(s), Shape{r.count}, DType::i64),
                          at(out, DType::f32, l1().slice_offset(s), r.count));
  }
  return out;
}

std::vector<float> AsyncHzp::gather_gradient() {
  const Allocation g32 = fixed_ ? converted_opt_grad() : Allocation{};
  return gather_opt_slices(fixed_ ? ConstTensorView(g32.data(), Shape{l1().slice_total()}, DType::f32) : opt_grad_view());
}

std::vector<float> AsyncHzp::gather_master_params() {
  if (opt_->has_master()) return gather_opt_slices(opt_->master());
  return gather_working_params();  // fp32: the parameter pieces are the master
}

std::vector<float> AsyncHzp::gather_working_params() {
  // The shards take the last update first; then each optimizer slice's piece of them is current everywhere.
  if (async_) ensure_refreshed();
  const Allocation mine = zeroed(l1().slice_total(), DType::f32, AllocationTag::comm);
  for (int s = 0; s < l1().num_segments(); ++s)
    kernels::cast(at(mine, DType::f32, l1().slice_offset(s), l1().slice_numel(s)), opt_piece(s), stream_);
  return gather_opt_slices(at(mine, DType::f32, 0, l1().slice_total()));
}

std::vector<float> AsyncHzp::gather_opt_slices(ConstTensorView mine) {
  // Every rank's optimizer slice; slice o of every segment taken from any rank that holds it.
  const int w = world_->size();
  const std::int64_t s1 = l1().slice_total();
  std::vector<float> all(static_cast<std::size_t>(s1 * w));
  // Off the hot path (tests, the state dump): the slice comes to the host first (a NCCL group stages host buffers).
  const std::vector<float> host = host_floats(mine, stream_);
  debug_comm_->all_gather(ConstTensorView(host.data(), Shape{s1}, DType::f32),
                          TensorView(all.data(), Shape{s1 * w}, DType::f32), StreamRef::host());
  std::vector<float> out(static_cast<std::size_t>(l1().total_numel()));
  for (int r = 0; r < w; ++r)
    for (int s = 0; s < l1().num_segments(); ++s) {
      const ShardLayout::Range v = l1().valid_range(s, g_.opt_index(r));
      if (v.count > 0)
        std::memcpy(out.data() + l1().global_offset(s) + v.begin, all.data() + r * s1 + l1().slice_offset(s),
                    static_cast<std::size_t>(v.count) * sizeof(float));
    }
  return out;
}

}  // namespace

std::unique_ptr<Scheduler> make_asynchzp_scheduler(const SchedulerArgs& a) {
  return std::make_unique<AsyncHzp>(a);
}

}  // namespace hzp::schedulers
