// The step driver (step_driver.hpp): data, the schedule's actions over a parameter engine, deterministic
// mode's retries, the step end and the StepStats.
#include "hzp/schedulers/step/step_driver.hpp"

#include <algorithm>
#include <tuple>

#include "hzp/collectives/phantom_peers.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "hzp/schedulers/step/boundary_order.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::schedulers {

PipelineLayout pipeline_layout_from(const SchedulerOptions& o, int units) {
  const bool interleaved = o.schedule == PipelineScheduleKind::interleaved;
  if (interleaved && o.virtual_stages < 2)
    HZP_THROW(ConfigError, "pipeline: scheduler.schedule = interleaved with scheduler.virtual_stages = ",
              o.virtual_stages, ": interleaving needs at least 2 chunks per stage. Fix: virtual_stages >= 2, or "
              "schedule = 1f1b");
  if (!interleaved && o.virtual_stages != 1)
    HZP_THROW(ConfigError, "pipeline: scheduler.virtual_stages = ", o.virtual_stages, " with scheduler.schedule = ",
              to_string(o.schedule), ", which runs one chunk per stage. Fix: schedule = interleaved, or "
              "virtual_stages = 1");
  if (o.pp_layers.empty()) return PipelineLayout::balanced(units, o.pp, o.virtual_stages);
  if (o.virtual_stages != 1 || static_cast<int>(o.pp_layers.size()) != o.pp)
    HZP_THROW(ConfigError, "pipeline: scheduler.pp_layers lists ", o.pp_layers.size(), " stages for scheduler.pp = ",
              o.pp, " at scheduler.virtual_stages = ", o.virtual_stages, ". Fix: one block count per stage, and "
              "virtual_stages = 1 (interleaved chunks are always balanced)");
  return PipelineLayout::from_blocks(units, o.pp_layers);
}

std::optional<StepPipeline> step_pipeline(const SchedulerOptions& options, const ProcessGroups& groups, int units) {
  if (groups.dims().pp == 1) return std::nullopt;
  StepPipeline p;
  p.group = groups.pipeline();
  p.layout = pipeline_layout_from(options, units);
  p.kind = options.schedule;
  HZP_CHECK(p.group != nullptr && p.layout.pp == p.group->size(), "step pipeline: ", groups.dims().describe(),
            " but a layout of ", p.layout.pp, " stages");
  return p;
}

StepDriver::StepDriver(std::string scheduler, const workloads::Workload& model, const workloads::TrainConfig& train,
                       CachingAllocator& alloc, int rank, int world_size, std::optional<StepPipeline> pipeline,
                       coll::Communicator* context, StreamRef stream)
    : scheduler_(std::move(scheduler)), model_(model), train_(train), rank_(rank), world_size_(world_size),
      pipeline_(std::move(pipeline)), context_(context && context->size() > 1 ? context : nullptr), stream_(stream) {
  HZP_CHECK(stream_.device() == alloc.device(), scheduler_, ": the compute stream is on ", to_string(stream_.device()),
            " but the allocator hands out memory on ", to_string(alloc.device()));
  // Pipeline stages and context parallelism run on a CUDA stream: the boundary messages go over a communicator per
  // directed link, the model's context holds its shard's positions in device memory and ring attention's exchanges
  // are ordered on the stream (docs/cuda.md, "Pipeline on the GPU", "Context parallelism on the GPU").
  const workloads::ContextShard* shard = model_.context_shard();
  HZP_CHECK((shard ? shard->cp() : 1) == (context_ ? context_->size() : 1), scheduler_, ": the model runs ",
            shard ? shard->cp() : 1, " context-parallel shares of every sequence, but the step's context group has ",
            context_ ? context_->size() : 1, " ranks");
  const workloads::BatchPlan plan(train_.global_batch, train_.micro_batch_size, world_size_);
  const int m = static_cast<int>(plan.micro_batches_of(rank_).size()), units = model_.layout().num_units();
  model_requests_ = coll::StreamOrderedRequests(stream_);
  const workloads::ContextOptions options{.micro_batch_size = train_.micro_batch_size, .recompute = train_.recompute,
                                          .stream = stream_, .requests = &model_requests_};
  if (pipeline_) {
    const int stage = pipeline_->group->rank();
    actions_ = pipeline_schedule(pipeline_->kind, pipeline_->layout, stage, m);
    if (stream_.device().is_cuda()) {  // NCCL matches messages by order (boundary_order.hpp); MPI by tag
      std::vector<std::vector<Action>> all;
      for (int s = 0; s < pipeline_->layout.pp; ++s)
        all.push_back(pipeline_schedule(pipeline_->kind, pipeline_->layout, s, m));
      check_boundary_order(pipeline_->layout, all);
    }
    const workloads::StageCut cut = pipeline_->layout.cut(stage);
    for (int u = 0; u < units; ++u)
      HZP_CHECK(model_.layout().unit(u).runs == (cut.stage_of_unit[static_cast<std::size_t>(u)] == stage), scheduler_,
                ": pipeline stage ", stage, " runs units as in '", pipeline_->layout.describe(), "', but the model was "
                "built for another cut (unit ", u, "). Fix: build the model with PipelineLayout::cut(stage)");
    stage_ = std::make_unique<PipelineStage>(model_, pipeline_->layout, *pipeline_->group, alloc, options);
    if (coll::phantom_peers(*pipeline_->group)) stage_->model_peer_stages(pipeline_->kind);
  } else {
    actions_ = sequential_schedule(m, units);
    check_schedule(actions_, m, units);
    ctx_ = model_.make_context(alloc, options);
  }
  if (stream_.device().is_cuda()) {
    for (std::size_t i = 0; i < 2 * actions_.size(); ++i) marks_.emplace_back(stream_.device());
    end_mark_ = TimedEvent(stream_.device());
    stall_clock_ = std::make_unique<coll::DeviceStallClock>(stream_);
    stall_marks_.assign(marks_.size(), 0);
  }
  inputs_.resize(static_cast<std::size_t>(train_.micro_batch_size * model_.local_seq_len()));
  targets_.resize(inputs_.size());
  if (shard) {
    whole_inputs_.resize(static_cast<std::size_t>(train_.micro_batch_size * model_.seq_len()));
    whole_targets_.resize(whole_inputs_.size());
  }
  // first_ and whole_first_ are sized by the first packed micro-batch (fill_tokens).
}

void StepDriver::fill_tokens(const Attempt& at, int mb, std::span<std::int32_t> inputs, std::span<std::int32_t> targets,
                             std::span<std::int32_t> first) {
  const std::int64_t j = at.mine[static_cast<std::size_t>(mb)];
  const workloads::ContextShard* shard = model_.context_shard();
  const bool packed = !first.empty();
  if (shard == nullptr) {
    if (packed)
      workloads::fill_micro_batch(*at.batch.source, at.plan, at.batch.step, j, inputs, targets, first);
    else
      workloads::fill_micro_batch(*at.batch.source, at.plan, at.batch.step, j, inputs, targets);
    return;
  }
  // Every rank of the context group reads the same whole sequences and keeps its two chunks of each; document
  // starts stay global positions, which is what ring attention and RoPE read under context parallelism.
  if (packed) {
    whole_first_.resize(whole_inputs_.size());
    workloads::fill_micro_batch(*at.batch.source, at.plan, at.batch.step, j, whole_inputs_, whole_targets_,
                                whole_first_);
    shard->take(whole_first_, first, train_.micro_batch_size);
  } else {
    workloads::fill_micro_batch(*at.batch.source, at.plan, at.batch.step, j, whole_inputs_, whole_targets_);
  }
  shard->take(whole_inputs_, inputs, train_.micro_batch_size);
  shard->take(whole_targets_, targets, train_.micro_batch_size);
}

StepDriver::~StepDriver() = default;

void StepDriver::set_unit_sleep(UnitSleep sleep) {
  unit_sleep_ = sleep;
  if (stage_) stage_->set_unit_sleep(sleep);
}

StepStats StepDriver::step(const StepBatch& batch, ParameterEngine& engine) {
  HZP_CHECK(batch.source != nullptr, scheduler_, ": step ", batch.step, " has no data source");
  HZP_CHECK(batch.step == steps_done_, scheduler_, ": steps run in order; expected step ", steps_done_, ", got ",
            batch.step);
  const Stopwatch whole;
  const workloads::BatchPlan plan(train_.global_batch, train_.micro_batch_size, world_size_);
  const std::vector<std::int64_t> mine = plan.micro_batches_of(rank_);
  const Attempt at{batch, plan, mine, static_cast<double>(train_.global_batch * model_.seq_len())};
  FixedPointGrads* fixed = engine.fixed_point();
  // The whole step's waits of the compute stream on communication are timed on the device (nothing on the host).
  std::optional<coll::DeviceWaitScope> observe_stalls;
  if (stall_clock_) observe_stalls.emplace(stall_clock_.get());

  std::vector<double> losses(mine.size(), 0.0);  // per micro-batch, in local order
  double waited = 0;                             // on pipeline peers
  // Deterministic mode: an attempt whose fixed-point tally overflowed anywhere runs again (the same verdict
  // on every rank); otherwise the body runs once.
  for (bool accepted = false; !accepted;) {
    if (fixed) fixed->begin_attempt(batch.step);
    (void)model_.take_step_statistics();  // a retried attempt routes its micro-batches again
    engine.begin_attempt(batch.step, actions_);
    if (pipeline_)
      waited += run_stage(at, engine, losses);
    else
      run_whole(at, engine, losses);
    engine.attempt_done();
    accepted = !fixed || conclude_fixed_point_attempt(*fixed, engine.verdict_group());
    if (!accepted) engine.attempt_voided();
  }
  // The model's step statistics (the MoE load) are this rank's tokens' routing: under context parallelism they
  // travel with the losses, whose shares are summed over the cp group, then over the data-parallel replicas.
  std::vector<double> stats = model_.take_step_statistics();
  if (context_ != nullptr) {  // each rank's losses are its tokens' shares: the micro-batches' are their sums
    std::vector<double> sums = losses;
    sums.insert(sums.end(), stats.begin(), stats.end());
    context_->all_reduce(TensorView(sums.data(), Shape{static_cast<std::int64_t>(sums.size())}, DType::f64),
                         coll::ReduceOp::sum, StreamRef::host());
    std::copy(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(losses.size()), losses.begin());
    std::copy(sums.begin() + static_cast<std::ptrdiff_t>(losses.size()), sums.end(), stats.begin());
  }
  end_model_step(std::move(stats), engine.scalars());
  const double compute_seconds = whole.wall() - waited;

  const StepFinish end = engine.finish_step(batch.step, scheduled_learning_rate(train_, batch.step));
  if (!marks_.empty()) {
    end_mark_.record(stream_);
    end_mark_.synchronize();  // the update is done before the step reports
  }
  // The model's kept tp collectives and ring attention's exchanges (on a CUDA stream), once per step, after the
  // norm's synchronisation and the step's end: their counters are recorded and each one's deadline
  // (collectives.timeout_s) is enforced here. The stream is past them by now (the compute stream waited for each
  // ring pass's lane before the pass returned), so this adds no host wait of its own. A collective that never ends holds the
  // stream, so the synchronisations before this one wait on it as they do on the engines' kept requests; the
  // watchdog (harness.watchdog_s) reports that.
  model_requests_.complete();
  ++steps_done_;
  StepStats st = data_parallel_step_stats(batch.step, engine.scalars(), plan, losses, fixed, end.update,
                                          train_.global_batch * model_.seq_len(), compute_seconds,
                                          end.optimizer_seconds, 0);
  st.pipeline_wait_seconds = waited;
  for (const std::int64_t j : mine)
    st.attention_pairs += workloads::micro_batch_attention_pairs(*batch.source, plan, batch.step, j,
                                                                 model_.context_shard());
  st.background_waits = engine.background_waits();
  st.seconds = whole.wall();
  if (!marks_.empty()) {
    st.device_timed = true;
    std::tie(st.forward_seconds, st.backward_seconds) = device_phase_seconds();
    // The step end on the device: from the last action's end to the update's (collectives, norm, update, gathers).
    st.optimizer_seconds = TimedEvent::elapsed_ms(marks_.back(), end_mark_) * 1e-3;
    // The stalls, read now that the stream has passed end_mark_ (no wait of their own), are taken out of the
    // phase whose events bracket them and reported as exposed communication.
    const std::vector<coll::Stall> stalls = stall_clock_->settle();
    std::vector<StallSpan> spans(actions_.size());
    for (std::size_t i = 0; i < actions_.size(); ++i)
      spans[i] = {stall_marks_[2 * i], stall_marks_[2 * i + 1], actions_[i].kind == Action::Kind::forward};
    stalls_ = split_stalls(stalls, spans, stall_marks_.back());
    st.forward_seconds -= stalls_.forward;
    st.backward_seconds -= stalls_.backward;
    st.optimizer_seconds -= stalls_.step_end;
    st.device_comm_timed = true;
    st.device_comm_wait_seconds = stalls_.total();
  }
  return st;
}

std::pair<double, double> StepDriver::device_phase_seconds() const {
  double fwd = 0, bwd = 0;
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    const double s = TimedEvent::elapsed_ms(marks_[2 * i], marks_[2 * i + 1]) * 1e-3;
    (actions_[i].kind == Action::Kind::forward ? fwd : bwd) += s;
  }
  return {fwd, bwd};
}

void StepDriver::mark_action(std::size_t i, bool end) {
  const std::size_t k = 2 * i + (end ? 1 : 0);
  marks_[k].record(stream_);
  stall_marks_[k] = stall_clock_->recorded();
}

void StepDriver::end_model_step(std::vector<double> stats, coll::Communicator& data_parallel) {
  // The model's non-gradient state (the MoE balancing bias) moves by the whole global batch's statistics: this
  // rank's summed over its data-parallel replicas (counts: exact in any order), so every replica updates alike.
  if (stats.empty()) return;
  data_parallel.all_reduce(TensorView(stats.data(), Shape{static_cast<std::int64_t>(stats.size())}, DType::f64),
                           coll::ReduceOp::sum, StreamRef::host());
  model_.end_step(stats);
}

void StepDriver::run_whole(const Attempt& at, ParameterEngine& engine, std::vector<double>& losses) {
  const int units = model_.layout().num_units();
  for_each_unit_call(actions_, [&](const Action& a, int u) {
    // The action's first and last unit calls bracket it on the device (run_whole's actions are actions_).
    const auto i = static_cast<std::size_t>(&a - actions_.data());
    const bool forward = a.kind == Action::Kind::forward;
    if (!marks_.empty() && u == (forward ? a.first_unit : a.end_unit - 1)) mark_action(i, false);
    if (forward) {
      if (u == 0) {
        first_.resize(at.batch.source->packs_documents() ? inputs_.size() : 0);
        fill_tokens(at, a.micro_batch, inputs_, targets_, first_);
        ctx_->begin(inputs_, targets_, at.normaliser, first_);
        engine.micro_batch_tokens(a.micro_batch, inputs_);
      }
      model_.forward(u, engine.unit_params(u, a), *ctx_);
      unit_sleep_.after(u, units);  // before the engine's hook, as in a pipeline stage: the unit's time
      engine.forward_done(u, a);
      if (u == units - 1) losses[static_cast<std::size_t>(a.micro_batch)] = ctx_->loss();
    } else {
      // Parameters first, then gradient buffers: an engine with rings hands them out in that order.
      const workloads::UnitParams params = engine.unit_params(u, a);
      const workloads::UnitGrads grads = engine.unit_grads(u, a);
      model_.backward(u, params, *ctx_, grads);
      unit_sleep_.after(u, units);
      engine.backward_done(u, a);
    }
    if (!marks_.empty() && u == (forward ? a.end_unit - 1 : a.first_unit)) mark_action(i, true);
  });
}

double StepDriver::run_stage(const Attempt& at, ParameterEngine& engine, std::vector<double>& losses) {
  PipelineStage::Hooks hooks;
  hooks.params = [&](int u, const Action& a) { return engine.unit_params(u, a); };
  hooks.grads = [&](int u, const Action& a) { return engine.unit_grads(u, a); };
  hooks.forward_done = [&](int u, const Action& a) { engine.forward_done(u, a); };
  hooks.backward_done = [&](int u, const Action& a) { engine.backward_done(u, a); };
  if (!marks_.empty()) hooks.mark = [&](std::size_t i, bool end) { mark_action(i, end); };
  hooks.tokens = [&](int mb, std::span<std::int32_t> inputs, std::span<std::int32_t> targets,
                     std::vector<std::int32_t>& first) {
    first.resize(at.batch.source->packs_documents() ? inputs.size() : 0);
    fill_tokens(at, mb, inputs, targets, first);
  };
  const int m = static_cast<int>(at.mine.size());
  losses = stage_->run(actions_, m, at.normaliser, hooks);
  double waited = stage_->wait_seconds();
  // Only the last stage holds the losses (zeros elsewhere): the sum over the stages is exact. The stages meet
  // here, so a stage that finished early waits for the others: its share of the bubble, timed as such.
  const Stopwatch drain;
  pipeline_->group->all_reduce(TensorView(losses.data(), Shape{m}, DType::f64), coll::ReduceOp::sum,
                               StreamRef::host());
  return waited + drain.wall();
}

void StepDriver::plan_pipeline_collectives(const PlanGroup& pipeline, std::int64_t micro_batches,
                                           CollectiveLedger& out) {
  out.all_reduce(pipeline, micro_batches, DType::f64, 1, "per step (micro-batch losses from the last stage)");
}

void StepDriver::plan_context_collectives(const PlanGroup& context, std::int64_t micro_batches,
                                          std::int64_t step_statistics, CollectiveLedger& out) {
  out.all_reduce(context, micro_batches + step_statistics, DType::f64, 1,
                 step_statistics > 0 ? "per step (micro-batch losses: the shares of each sequence; and the MoE load)"
                                     : "per step (micro-batch losses: the shares of each sequence)");
}

void StepDriver::plan_collectives(const workloads::TrainConfig& train, const workloads::ParamLayout& layout,
                                  const PlanGroup& group, const PlanGroup& verdict, std::int64_t micro_batches,
                                  CollectiveLedger& out) {
  if (!train.deterministic) {
    out.all_reduce(group, 1, DType::f64, 1, "per step (loss)");  // data_parallel_step_stats
    return;
  }
  // conclude_fixed_point_attempt: every tensor's maximum and the two overflow flags; ordered_global_loss.
  std::int64_t tensors = 0;
  for (const workloads::Unit& u : layout.units()) tensors += static_cast<std::int64_t>(u.tensors.size()) + u.absent_tensors;
  out.all_reduce(verdict, tensors + 2, DType::f64, 1, "per attempt (fixed-point tally, max)");
  out.all_gather(group, micro_batches, DType::f64, 1, "per step (loss per micro-batch)");
}

}  // namespace hzp::schedulers
