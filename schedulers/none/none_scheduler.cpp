// The single-rank reference scheduler (none.hpp): full flat buffers, micro-batches in order, then
// norm, clipping and AdamW. Written to be obviously right rather than fast; it shares no step logic
// with the distributed schedulers. The same code runs on the host or on one GPU: every buffer comes from
// the given allocator (host or CudaBacking) and every kernel is enqueued on SchedulerArgs::stream, whose
// device selects the kernels' CPU references or their CUDA twins (docs/cuda.md).
#include "hzp/schedulers/none.hpp"

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/kernels/grad_norm.hpp"
#include "hzp/schedulers/common/checkpoint_state.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/common/state_dump.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::schedulers {

using workloads::Precision;

struct NoneScheduler::State {
  const workloads::Workload* model = nullptr;
  workloads::TrainConfig train;
  CachingAllocator* alloc = nullptr;
  StreamRef stream = StreamRef::host();  // the loop's compute stream; its device is the allocator's
  std::int64_t n = 0;  // parameters
  Allocation params;   // working parameters (param dtype)
  Allocation master;   // bf16-mixed only: fp32 master weights
  Allocation grads, m, v;
  std::unique_ptr<workloads::MicroBatchContext> ctx;
  std::vector<std::int32_t> inputs, targets, first;  // first: document starts (data.packing = documents)
  std::int64_t steps_done = 0;
  // On a CUDA stream, the step's timing: events recorded on the stream before each micro-batch's forward,
  // after it, after its backward (so 2·micro-batches + 1 of them, back to back), and after the update.
  std::vector<TimedEvent> marks;
  TimedEvent done;
  // Deterministic mode: the micro-batch gradients' fixed-point sum (int64 [n]) and its scales.
  std::unique_ptr<FixedPointGrads> fixed;
  Allocation fixed_sum;

  TensorView view(const Allocation& a, DType t) const {
    return TensorView(a.data(), Shape{n}, t, alloc->device());
  }
  Precision precision() const { return train.precision; }
  TensorView params_view() const { return view(params, workloads::param_dtype(precision())); }
  TensorView master_view() const {
    return workloads::has_separate_master(precision()) ? view(master, DType::f32) : params_view();
  }
  TensorView grads_view() const { return view(grads, workloads::grad_dtype(precision())); }
  TensorView m_view() const { return view(m, workloads::master_dtype(precision())); }
  TensorView v_view() const { return view(v, workloads::master_dtype(precision())); }
};

namespace {

/// The counter-based initial values (in `master`'s dtype) written into `master`: directly on the host,
/// through a host staging copy on a device (the initialiser is host code; this runs once, before step 0).
void init_master(const workloads::Workload& model, std::uint64_t seed, const TensorView& master, StreamRef stream) {
  const auto n = static_cast<std::size_t>(master.numel());
  if (master.device().is_cpu()) {
    if (master.dtype() == DType::f64)
      model.init_params(0, std::span<double>(master.as<double>(), n), seed);
    else
      model.init_params(0, std::span<float>(master.as<float>(), n), seed);
    return;
  }
  std::vector<float> host(n);
  model.init_params(0, std::span<float>(host), seed);
  copy_bytes(master.data(), master.device(), host.data(), Device::cpu(), master.bytes(), stream);
  stream.synchronize();  // `host` dies here
}

}  // namespace

NoneScheduler::NoneScheduler(const SchedulerArgs& args) : state_(std::make_unique<State>()) {
  HZP_CHECK(args.model != nullptr && args.allocator != nullptr, "none: a model and an allocator are required");
  args.train.validate();
  if (args.train.precision != args.model->precision())
    HZP_THROW(ConfigError, "train.precision = ", workloads::to_string(args.train.precision),
              " but the model was built for ", workloads::to_string(args.model->precision()));
  if (args.world != nullptr)
    HZP_THROW(ConfigError, "scheduler none is the single-rank reference and takes no communicator; use one "
              "rank (or a distributed scheduler)");
  State& s = *state_;
  s.model = args.model;
  s.train = args.train;
  s.alloc = args.allocator;
  s.stream = args.stream;
  s.n = s.model->layout().total_numel();
  const Precision p = s.precision();
  const DType md = workloads::master_dtype(p);
  if (s.stream.device() != s.alloc->device())
    HZP_THROW(ConfigError, "none: the compute stream is on ", to_string(s.stream.device()), " but the allocator hands "
              "out memory on ", to_string(s.alloc->device()), "; both must be on the same device");
  if (s.stream.device().is_cuda()) {
    // Refused here by name rather than deep inside a kernel: the CUDA kernels have no fp64 twin (fp64 is
    // the CPU oracle's type) and deterministic mode's fixed-point kernels have none either.
    if (md == DType::f64)
      HZP_THROW(ConfigError, "train.precision = fp64 on ", to_string(s.stream.device()), ": the CUDA kernels run fp32 "
                "and bf16 only (fp64 is the CPU reference's type). Fix: train.precision = fp32 or bf16-mixed, or "
                "backend = cpu");
    if (s.train.deterministic)
      HZP_THROW(ConfigError, "train.deterministic = true on ", to_string(s.stream.device()), ": deterministic mode "
                "covers the CPU backend only (docs/deterministic.md). Fix: backend = cpu, or "
                "train.deterministic = false");
  }

  // Initial values come from the counter-based initialiser in the master dtype; bf16-mixed rounds them
  // once into the working copy, exactly as an AdamW update would.
  if (workloads::has_separate_master(p)) {
    s.master = s.alloc->allocate(static_cast<std::size_t>(s.n) * sizeof(float), AllocationTag::master);
    s.params = s.alloc->allocate(static_cast<std::size_t>(s.n) * sizeof(bf16), AllocationTag::param);
  } else {
    s.params = s.alloc->allocate(static_cast<std::size_t>(s.n) * dtype_size(md), AllocationTag::param);
  }
  const TensorView master = s.master_view();
  init_master(*s.model, s.train.seed, master, s.stream);
  if (workloads::has_separate_master(p)) kernels::cast(s.params_view(), master, s.stream);

  s.grads = zeroed_on(*s.alloc, s.n, workloads::grad_dtype(p), AllocationTag::grad, s.stream);
  s.m = zeroed_on(*s.alloc, s.n, md, AllocationTag::adam_m, s.stream);
  s.v = zeroed_on(*s.alloc, s.n, md, AllocationTag::adam_v, s.stream);

  if (s.train.deterministic) {
    s.fixed = std::make_unique<FixedPointGrads>(s.model->layout(), s.train.micro_batches(), args.fixed_point);
    s.fixed_sum = zeroed_on(*s.alloc, s.n, DType::i64, AllocationTag::grad, s.stream);
  }

  s.ctx = s.model->make_context(*s.alloc, {.micro_batch_size = s.train.micro_batch_size,
                                           .recompute = s.train.recompute, .stream = s.stream});
  const auto tokens = static_cast<std::size_t>(s.train.micro_batch_size * s.model->seq_len());
  s.inputs.resize(tokens);
  s.targets.resize(tokens);
  s.first.resize(tokens);
  if (s.stream.device().is_cuda()) {
    for (std::int64_t i = 0; i < 2 * s.train.micro_batches() + 1; ++i) s.marks.emplace_back(s.stream.device());
    s.done = TimedEvent(s.stream.device());
  }
}

NoneScheduler::~NoneScheduler() = default;

double NoneScheduler::learning_rate(const workloads::TrainConfig& t, std::int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  if (step >= t.steps || t.steps == t.warmup_steps) return t.lr_min;
  const double progress = static_cast<double>(step - t.warmup_steps) / static_cast<double>(t.steps - t.warmup_steps);
  return t.lr_min + 0.5 * (t.lr - t.lr_min) * (1.0 + std::cos(std::numbers::pi * progress));
}

StepStats NoneScheduler::step(const StepBatch& batch) {
  State& s = *state_;
  const Stopwatch whole;
  HZP_CHECK(batch.source != nullptr, "none: step ", batch.step, " has no data source");
  HZP_CHECK(batch.step == s.steps_done, "none: steps run in order; expected step ", s.steps_done, ", got ",
            batch.step);
  const workloads::DataSource& src = *batch.source;
  if (src.seq_len() != s.model->seq_len() || src.vocab() > s.model->vocab())
    HZP_THROW(ConfigError, "data source has seq_len ", src.seq_len(), " and vocab ", src.vocab(),
              " but the model has model.seq_len = ", s.model->seq_len(), " and model.vocab = ", s.model->vocab());

  const workloads::ParamLayout& layout = s.model->layout();
  const int units = layout.num_units();
  const workloads::BatchPlan plan(s.train.global_batch, s.train.micro_batch_size, 1);
  const double normaliser = static_cast<double>(s.train.global_batch * s.model->seq_len());
  const TensorView params = s.params_view();
  const TensorView grads = s.grads_view();

  // --- forward and backward of every micro-batch, gradients accumulated in micro-batch order. Deterministic
  // mode: each micro-batch's gradient is written fresh, and every block, once final, is converted to fixed
  // point and added to the integer sum; an element out of range voids the attempt and the step runs again.
  const bool on_device = !s.marks.empty();
  const auto mark = [&](std::size_t i) {
    if (on_device) s.marks[i].record(s.stream);
  };
  double loss = 0, pairs = 0;
  std::int64_t retries = 0;
  const bool packed = src.packs_documents();
  for (bool accepted = false; !accepted;) {
    loss = 0;
    pairs = 0;  // a retried attempt counts its micro-batches once
    if (s.fixed) s.fixed->begin_attempt(batch.step);
    (void)s.model->take_step_statistics();  // a retried attempt routes its micro-batches again
    for (std::int64_t j = 0; j < plan.micro_batches_per_step(); ++j) {
      mark(static_cast<std::size_t>(2 * j));
      if (packed) {
        workloads::fill_micro_batch(src, plan, batch.step, j, s.inputs, s.targets, s.first);
        s.ctx->begin(s.inputs, s.targets, normaliser, s.first);
      } else {
        workloads::fill_micro_batch(src, plan, batch.step, j, s.inputs, s.targets);
        s.ctx->begin(s.inputs, s.targets, normaliser);
      }
      pairs += workloads::micro_batch_attention_pairs(src, plan, batch.step, j);
      for (int u = 0; u < units; ++u) s.model->forward(u, workloads::unit_params_from_flat(layout, u, params), *s.ctx);
      mark(static_cast<std::size_t>(2 * j + 1));
      loss += s.ctx->loss();
      for (int u = units - 1; u >= 0; --u) {
        s.model->backward(u, workloads::unit_params_from_flat(layout, u, params), *s.ctx,
                          workloads::unit_grads_from_flat(layout, u, grads, /*fresh=*/j == 0 || s.fixed != nullptr));
        if (s.fixed)
          for (int b : layout.grads_final_after(u))
            s.fixed->to_fixed(b, workloads::unit_block(layout, b, ConstTensorView(grads)),
                              workloads::unit_block(layout, b, s.view(s.fixed_sum, DType::i64)), /*accumulate=*/j > 0);
      }
      mark(static_cast<std::size_t>(2 * j + 2));
    }
    // One rank: its tally is the global one.
    accepted = !s.fixed || s.fixed->conclude(s.fixed->tally());
    if (s.fixed) retries = s.fixed->retries();
  }
  if (s.fixed)
    for (int u = 0; u < units; ++u)
      s.fixed->to_float(u, 0, workloads::unit_block(layout, u, ConstTensorView(s.view(s.fixed_sum, DType::i64))),
                        workloads::unit_block(layout, u, grads));
  // One rank holds the whole global batch: its statistics are the global ones (the MoE balancing bias).
  s.model->end_step(s.model->take_step_statistics());
  const double compute_seconds = whole.wall();

  // --- norm, clipping coefficient, AdamW ---
  const Stopwatch opt;
  const ConstTensorView g = grads;
  const double norm = kernels::grad_norm_from_sum_squares(
      s.fixed ? s.fixed->global_sum_squares(g, nullptr) : kernels::grad_norm_sum_squares({&g, 1}, s.stream));
  const double coef = kernels::grad_clip_coefficient(norm, s.train.clip);
  const double lr = learning_rate(s.train, batch.step);
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = s.train.beta1;
  h.beta2 = s.train.beta2;
  h.eps = s.train.eps;
  h.weight_decay = s.train.weight_decay;
  h.step = batch.step + 1;
  h.grad_scale = coef;
  if (workloads::has_separate_master(s.precision()))
    kernels::adamw_step(s.master_view(), s.m_view(), s.v_view(), g, h, params, s.stream);
  else
    kernels::adamw_step(params, s.m_view(), s.v_view(), g, h, s.stream);
  ++s.steps_done;
  if (on_device) {
    // The step's one wait for the device as a whole: the update must be done before the step reports
    // (the stream is the only one, so its last event covers every kernel).
    s.done.record(s.stream);
    s.done.synchronize();
  }

  StepStats st;
  st.step = batch.step;
  st.loss = loss;
  st.grad_norm = norm;
  st.clip_coefficient = coef;
  st.lr = lr;
  st.retries = retries;
  st.attention_pairs = pairs;
  st.tokens = s.train.global_batch * s.model->seq_len();
  st.compute_seconds = compute_seconds;
  st.optimizer_seconds = opt.wall();
  st.seconds = whole.wall();
  if (on_device) {
    const auto ms = [&](const TimedEvent& a, const TimedEvent& b) { return TimedEvent::elapsed_ms(a, b) * 1e-3; };
    st.device_timed = true;
    for (std::size_t j = 0; 2 * j + 2 < s.marks.size(); ++j) {
      st.forward_seconds += ms(s.marks[2 * j], s.marks[2 * j + 1]);
      st.backward_seconds += ms(s.marks[2 * j + 1], s.marks[2 * j + 2]);
    }
    st.compute_seconds = ms(s.marks.front(), s.marks.back());
    st.optimizer_seconds = ms(s.marks.back(), s.done);
  }
  return st;
}

void NoneScheduler::visit_state(StateVisitor& visitor) {
  const State& s = *state_;
  const workloads::ParamLayout& layout = s.model->layout();
  struct Component {
    const char* name;
    ConstTensorView flat;
  };
  std::vector<Component> comps = {{"param", s.params_view()}};
  if (workloads::has_separate_master(s.precision())) comps.push_back({"master", s.master_view()});
  comps.push_back({"grad", s.grads_view()});
  comps.push_back({"m", s.m_view()});
  comps.push_back({"v", s.v_view()});
  // The visitor reads host memory: device state is copied back first (between steps, off the hot path).
  std::vector<std::vector<std::byte>> host(comps.size());
  if (s.stream.device().is_cuda()) {
    for (std::size_t i = 0; i < comps.size(); ++i) {
      const ConstTensorView d = comps[i].flat;
      host[i].resize(d.bytes());
      copy_bytes(host[i].data(), Device::cpu(), d.data(), d.device(), d.bytes(), s.stream);
      comps[i].flat = ConstTensorView(host[i].data(), d.shape(), d.dtype());
    }
    s.stream.synchronize();
  }
  for (const Component& c : comps) visit_flat_component(layout, c.name, c.flat, visitor);
}

void NoneScheduler::checkpoint(StateArchive& archive) {
  State& s = *state_;
  // One rank holds everything: one run of the whole model, in the master's dtype (f64 in fp64 mode); on a GPU the
  // buffers go through host copies.
  const std::vector<StateArchive::Run> runs = whole_model_runs(s.n);
  const DType md = workloads::master_dtype(s.precision());
  const Device dev = s.alloc->device();
  device_array(archive, "master", md, runs, s.master_view().data(), s.n, dev, s.stream);
  device_array(archive, "m", md, runs, s.m.data(), s.n, dev, s.stream);
  device_array(archive, "v", md, runs, s.v.data(), s.n, dev, s.stream);
  if (archive.loading()) {
    // The working copy from the master, rounded once as the constructor and every update do.
    if (workloads::has_separate_master(s.precision())) kernels::cast(s.params_view(), s.master_view(), s.stream);
    s.stream.synchronize();
    s.steps_done = archive.next_step();
  }
  checkpoint_side_state(archive, *s.model, s.fixed.get());
}

ConstTensorView NoneScheduler::master_params() const { return state_->master_view(); }
ConstTensorView NoneScheduler::working_params() const { return state_->params_view(); }
ConstTensorView NoneScheduler::grads() const { return state_->grads_view(); }

std::unique_ptr<Scheduler> make_none_scheduler(const SchedulerArgs& args) {
  return std::make_unique<NoneScheduler>(args);
}

}  // namespace hzp::schedulers
