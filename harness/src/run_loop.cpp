// `hzpbench run` (run_loop.hpp). The flow, in order:
//   1. MPI (THREAD_MULTIPLE); the configuration resolved and checked for the MPI world size: a bad input
//      ends every rank alike with exit 2 before anything runs (printed once, by rank 0).
//   2. The data source opened (a missing or corrupt file is bad input, exit 2).
//   3. The context: topology, the `harness` communicator, the control channel, OpenBLAS threads.
//   4. Rank 0 creates the results file on its results thread (status `running`); every rank learns
//      whether it could (an existing file without --force, an unwritable directory: exit 2).
//   5. From here a failure on any rank is reported to rank 0, which marks the file `failed: <rank>:
//      <reason>` and ends the job (MPI_Abort at W > 1): the watchdog guards every stage, and a caught
//      SIGTERM, SIGINT or SIGUSR1 is such a failure (`terminated by SIG...`, exit 128 + its number).
//   6. The device (backend = cuda: the allocator over CudaBacking and the compute stream on cuda:0; no
//      visible device fails here, after the file exists, so it is marked failed). Calibration: the device
//      peak (table, or a measured sgemm on the CPU) and, when link profiles need
//      it, the model's compute rate on a calibration micro-batch; then the scheduler's communicators are
//      built with the resulting links (so the link emulator is configured at construction).
//   7. The loop: fault injection, scheduler.step metered, every rank's sample gathered to all ranks on the
//      harness communicator, rank 0's results thread appends the rows and prints the progress line;
//      non-finite losses are skipped (harness.skip_nonfinite) or end the run as `diverged` (exit 3).
//   8. The end: a barrier (a rank that failed never reaches it), the trace, the summary, status `ok`.
// Checkpoints (run_checkpoints.hpp): --resume restores the scheduler right after it is built and the loop starts at
// the stored step + 1; with checkpoints on (output.checkpoint_every or output.checkpoint_on_signal), every step
// ends with the ranks agreeing whether a signal was caught anywhere (one MAX all-reduce), and a checkpoint is
// written when one is due or a signal asks to stop, after which the run ends as `preempted` (exit 5).
#include "run_loop.hpp"

#include <time.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include "collective_only_scheduler.hpp"
#include "failure.hpp"
#include "blas_core.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/collectives/comm_wait_observer.hpp"
#include "hzp/collectives/mpi_bootstrap.hpp"
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/collectives/shared_buffer_backing.hpp"
#include "hzp/collectives/shm_message_counts.hpp"
#include "hzp/core/trace_sink.hpp"
#include "hzp/harness/compute_rate.hpp"
#include "hzp/harness/link_profiles.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "metrics.hpp"
#include "phantom_run.hpp"
#include "progress.hpp"
#include "run_checkpoints.hpp"
#include "results_rows.hpp"
#include "results_thread.hpp"
#include "run_context.hpp"
#include "signal_stop.hpp"
#include "summary.hpp"
#include "trace.hpp"
#include "watchdog.hpp"

namespace hzp::harness {
namespace {

// How long a failing rank waits for rank 0 to abort the job before aborting it itself (rank 0 may be the
// one that is stuck).
constexpr double kAbortGraceS = 30;
constexpr int kWatchdogCollectives = 8;

void sleep_s(double s) {
  timespec ts{static_cast<time_t>(s), static_cast<long>((s - std::floor(s)) * 1e9)};
  nanosleep(&ts, nullptr);
}

[[noreturn]] void wait_for_abort(int code) {
  const double until = wall_seconds() + kAbortGraceS;
  while (wall_seconds() < until) sleep_s(0.01);
  abort_job(code);
}

// --dump-tensors: rank 0 widens each tensor to fp32 and hands a copy to the results thread.
class DumpVisitor final : public schedulers::StateVisitor {
 public:
  DumpVisitor(ResultsThread* results, std::int64_t step) : results_(results), step_(step) {}

  void tensor(std::string_view component, std::string_view name, ConstTensorView full) override {
    if (results_ == nullptr) return;
    std::vector<float> data(static_cast<std::size_t>(full.numel()));
    std::string source = "fp32";
    if (full.dtype() == DType::f32) {
      std::copy_n(full.as<float>(), data.size(), data.begin());
    } else if (full.dtype() == DType::bf16) {
      kernels::cast(TensorView(data.data(), full.shape(), DType::f32), full, StreamRef::host());
      source = "bf16";
    } else if (full.dtype() == DType::f64) {
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(full.as<double>()[i]);
      source = "fp64";
    } else {
      HZP_THROW(UnsupportedError, "--dump-tensors: tensor ", name, " has dtype ", dtype_name(full.dtype()));
    }
    std::vector<std::int64_t> shape(full.shape().dims.begin(), full.shape().dims.begin() + full.shape().ndim);
    results_->post([step = step_, n = std::string(component) + "/" + std::string(name), shape = std::move(shape),
                    data = std::move(data), source](ResultsWriter& w) { w.dump_tensor(step, n, shape, data, source); });
  }

 private:
  ResultsThread* results_;
  std::int64_t step_;
};

/// One run after set-up: owns the model, allocator, communicators and scheduler.
class Run {
 public:
  /// `scheduler_counters` is set to the scheduler's communicators' counters once they exist, for the
  /// watchdog (which prints them) and back to null before they go.
  /// `resume`: the checkpoint to continue from (nullptr: start at step 0); `stop_signal`: set by the signal thread
  /// when checkpointing is on (0 = none caught on this rank).
  Run(const RunSetup& setup, RunContext& ctx, ResultsThread* results, Progress& progress,
      const workloads::DataSource& source, std::atomic<coll::CommCounters*>& scheduler_counters,
      ResumeSource* resume, RunCheckpoints& checkpoints, const std::atomic<int>& stop_signal)
      : s_(setup), o_(setup.opt), ctx_(ctx), results_(results), progress_(progress), source_(source),
        scheduler_counters_(scheduler_counters), root_(ctx.process_rank == 0), resume_(resume), checkpoints_(checkpoints),
        stop_signal_(stop_signal) {}

  ~Run() {
    trace::install(nullptr);
    scheduler_counters_.store(nullptr);
  }

  int execute() {
    origin_s_ = wall_seconds();
    ctx_.harness->broadcast(TensorView(&origin_s_, Shape{1}, DType::f64), 0, StreamRef::host());
    progress_.beat(-1, "building the model");
    model_ = s_.model->build(s_.train.precision);
    open_device();
    alloc_ = std::make_unique<CachingAllocator>(*backing_);
    if (o_.trace) {
      recorder_ = std::make_unique<TraceRecorder>();
      recorder_->name_thread(trace::current_thread_id(), "compute");
      trace::install(recorder_.get());
    }
    calibrate();
    build_scheduler();
    if (resume_ != nullptr) {
      progress_.beat(-1, "loading the checkpoint");
      resume_->restore(*scheduler_);
      first_step_ = resume_->meta().step + 1;
    }
    write_start_attributes();
    print_header();

    bool diverged = false;
    for (std::int64_t step = first_step_; step < s_.train.steps && !diverged; ++step) {
      diverged = !step_once(step);
      if (diverged || !checkpoints_.enabled()) continue;
      // Every rank learns whether a signal was caught anywhere: all stop after the same step, checkpointed.
      const int signo = static_cast<int>(all_reduce_max(*ctx_.harness, stop_signal_.load()));
      if (checkpoints_.due(step) || signo != 0) write_checkpoint_after(step);
      // A signal during the last step: every step ran, so the run is ok (with its checkpoint).
      if (signo != 0 && step + 1 < s_.train.steps) return finish(Outcome::preempted, signo, step);
    }
    return finish(diverged ? Outcome::diverged : Outcome::ok, 0, s_.train.steps - 1);
  }

 private:
  // ---- 6. the device and calibration --------------------------------------------------------------
  /// The memory every buffer of the run comes from and the stream every kernel runs on. plan_run has
  /// already refused cuda for a build without CUDA and for schedulers other than none.
  void open_device() {
    if (o_.backend != "cuda") {
      // collectives.mapped_buffers: every buffer the scheduler allocates is a SharedBuffer, so its messages to the
      // ranks of this machine go by mapping (docs/collectives.md "Mapped buffers").
      if (s_.uses_world_comm && s_.comm.mapped_buffers)
        backing_ = std::make_unique<coll::SharedBufferBacking>();
      else
        backing_ = std::make_unique<HostBacking>();
      return;
    }
    const int gpus = cuda_device_count();
    if (gpus == 0)
      HZP_THROW(ConfigError, "backend = cuda: no CUDA device visible to this process (CUDA_VISIBLE_DEVICES = '",
                std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? std::getenv("CUDA_VISIBLE_DEVICES") : "(unset)",
                "'). Fix: run on a GPU node (with its GPUs visible to the job), or set backend = cpu");
    // One GPU per rank (NCCL refuses two ranks of a group on one device): the rank's index among the ranks of
    // its machine picks it.
    if (ctx_.threads.ranks_on_machine > gpus)
      HZP_THROW(ConfigError, "backend = cuda: ", ctx_.threads.ranks_on_machine, " ranks on this machine but ", gpus,
                " visible GPU(s); each rank needs a GPU of its own. Fix: launch at most ", gpus, " rank(s) per node");
    const int device = ctx_.threads.machine_rank;
    backing_ = std::make_unique<CudaBacking>(device);
    stream_ = Stream(Device::cuda(device));
  }

  void calibrate() {
    progress_.beat(-1, "measuring the device peak");
    const double tokens = static_cast<double>(s_.train.micro_batch_size * s_.model->seq_len());
    if (o_.peak_tflops > 0) {
      peak_flops_ = o_.peak_tflops * 1e12;
      peak_source_ = "device.peak_tflops";
      peak_text_ = fmt_rate(peak_flops_) + " per rank (declared: device.peak_tflops)";
    } else if (stream_.device().is_cuda()) {
      // The table's dense bf16 peak (not a measurement): MFU on a GPU is quoted against the datasheet.
      const std::string name = cuda_device_name(stream_.device().index);
      const std::optional<double> tflops = gpu_peak_tflops(name);
      if (!tflops)
        HZP_THROW(ConfigError, "device.peak_tflops = 0 (from the device table) but ", to_string(stream_.device()),
                  " is '", name, "', which the table (H100, H200, GH200, A100) does not know. Fix: set "
                  "device.peak_tflops to its dense bf16 peak in TFLOP/s");
      peak_flops_ = *tflops * 1e12;
      peak_source_ = "table: " + name + " dense bf16";
      peak_text_ = fmt_rate(peak_flops_) + " per rank (" + peak_source_ + ")";
    } else {
      // The CPU backend: the machine's own GEMM rate on a model-like shape, agreed as the mean over ranks.
      const workloads::ModelSpec::Linear widest = s_.model->widest_linear();
      gemm_ = measure_gemm_peak(model_like_gemm_shape(static_cast<std::int64_t>(tokens), widest.in, widest.out));
      peak_flops_ = all_reduce_sum(*ctx_.harness, gemm_.flops_per_s) / ctx_.world_size;
      peak_source_ = "measured " + gemm_.shape_text() + ", " + gemm_.threads_text() + ", mean over ranks";
      peak_text_ = fmt_rate(peak_flops_) + " per rank (" + peak_source_ + ")";
    }

    LinkPlanInput in = link_plan_input(s_);
    if (s_.uses_world_comm && link_plan_needs_measurement(in) && stream_.device().is_cuda())
      // The rate is measured by a host run of the model (compute_rate.hpp); a GPU's would need its own.
      HZP_THROW(ConfigError, "links.profile = ", o_.links_profile, " with links.comm_to_compute = ", o_.comm_to_compute,
                " sets the emulated links from the model's measured compute rate, which is measured on the CPU "
                "only so far, and backend = cuda. Fix: links.emulate = false, or links.profile = none and "
                "links.comm_to_compute = 0 with the bandwidths given (links.intra.bandwidth_gbps / "
                "links.inter.bandwidth_gbps), or backend = cpu");
    if (s_.uses_world_comm && link_plan_needs_measurement(in)) {
      progress_.beat(-1, "measuring the model's compute rate");
      // With the benchmark hook's sleeps, as the step sleeps: links in the profile's ratio to the step's unit time.
      rate_ = measure_model_rate(*model_, s_.train, source_, 1, schedulers::UnitSleep(s_.sched));
      // Every rank must emulate the same links: the mean rate, and the slowest rank's micro-batch.
      in.flops_per_s = all_reduce_sum(*ctx_.harness, rate_->flops_per_s) / ctx_.world_size;
      in.micro_batch_s = all_reduce_max(*ctx_.harness, rate_->micro_batch_s);
      mean_rate_ = in.flops_per_s;
      max_micro_batch_s_ = in.micro_batch_s;
    }
    if (s_.uses_world_comm) {
      links_ = plan_links(in);
    } else {
      links_.links = in.given;
      links_.links.enabled = false;
      links_.how = "not used: scheduler " + o_.scheduler + " has no communicator";
    }
  }

  // ---- communicators and the scheduler -------------------------------------------------------------
  void build_scheduler() {
    progress_.beat(-1, "building the scheduler");
    if (s_.uses_world_comm && stream_.device().is_cuda() && !ctx_.phantom) {
      // One GPU per rank: NCCL over the devices, its unique id broadcast over MPI; every group is split from it.
      // A phantom rank has no peers to run NCCL with: its world below takes device buffers on their stream.
      coll::MpiBootstrap bootstrap(MPI_COMM_WORLD);
      coll::NcclCommConfig nc;
      nc.name = "world";
      nc.device = stream_.device().index;
      nc.timeout_s = s_.comm.timeout_s;
      nc.links = links_.links;  // held on the communication streams (docs/cuda.md, link emulation on the GPU)
      for (int r = 0; r < ctx_.world_size; ++r) nc.node_of_rank.push_back(ctx_.topology.node_of(r));
      world_ = std::make_unique<coll::NcclCommunicator>(bootstrap, nc);
      scheduler_counters_.store(&world_->counters());
    } else if (s_.uses_world_comm) {
      coll::MpiCommConfig cc = s_.comm;
      cc.links = links_.links;  // the emulator is configured at construction, after calibration
      // A phantom world's calls on device buffers enqueue their stand-in and link hold on the call's stream
      // (docs/phantom.md, "On the GPU"); host buffers (the loss, the norm's sum) are handled on the host as on the CPU.
      auto mpi = ctx_.phantom ? coll::make_phantom_world(ctx_.topology, cc, ctx_.rank, "world")
                              : coll::make_mpi_world(ctx_.topology, cc, MPI_COMM_WORLD, "world");
      mpi_world_ = mpi.get();
      world_ = std::move(mpi);
      scheduler_counters_.store(&world_->counters());
    }
    if (world_ && !o_.collective_only) {
      // One set of groups for the scheduler and the model. A tensor- or context-parallel model takes its groups
      // at construction, and a pipeline stage's holds only its units, so it is built again here; the whole model
      // built first served the calibration, whose rate (FLOP/s) and micro-batch time set the emulated links
      // identically for every scheduler compared.
      groups_ = std::make_unique<schedulers::ProcessGroups>(*world_, s_.dims, ctx_.topology);
      if (s_.dims.tp > 1 || s_.dims.pp > 1 || s_.dims.cp > 1 || s_.dims.ep > 1) {
        const workloads::StageCut cut =
            s_.dims.pp > 1 ? schedulers::pipeline_layout_from(s_.sched, model_->layout().num_units())
                                 .cut(groups_->pipeline()->rank())
                           : workloads::StageCut{};
        model_ = s_.model->build(s_.train.precision, {groups_->tensor(), s_.sched.sequence_parallel}, cut,
                                 {groups_->context()}, {groups_->expert()});
      }
    }
    schedulers::SchedulerArgs args;
    args.model = model_.get();
    args.train = s_.train;
    args.allocator = alloc_.get();
    args.world = world_.get();
    args.topology = &ctx_.topology;
    args.groups = groups_.get();
    args.stream = stream_.ref();
    args.options = s_.sched;
    scheduler_ = o_.collective_only ? make_collective_only_scheduler(args) : schedulers::make_scheduler(o_.scheduler, args);
    meter_ = std::make_unique<StepMeter>(*alloc_, world_ ? &world_->counters() : nullptr, scheduler_->ring_pool());
    rows_ = std::make_shared<ResultsRows>(ctx_.world_size, scheduler_->ring_pool() != nullptr);
    scale_.world_size = ctx_.world_size;
    const workloads::FlopsPerToken f = model_->flops_per_token();
    scale_.flops_per_token_full = f.full_attention;
    scale_.flops_per_token_causal = f.causal_attention;
    scale_.active_only = f.active_only;
    scale_.peak_flops_per_rank = peak_flops_;
  }

  void write_start_attributes() {
    if (!root_) return;
    std::vector<std::pair<std::string, AttrValue>> a = {
        {"warmup_steps", o_.warmup_steps},
        {"scheduler", std::string(scheduler_->name())},
        {"model.description", model_->describe()},
        {"model.num_params", s_.model->num_params()},
        {"model.flops_per_token", scale_.flops_per_token_full},
        {"model.flops_per_token_causal", scale_.flops_per_token_causal},
        {"model.flops_count_active_parameters", std::int64_t{scale_.active_only}},
        {"device.peak_flops_per_rank", peak_flops_},
        {"device.peak_source", peak_source_},
        {"device.memory", to_string(alloc_->device())},
        {"links.emulated", std::int64_t{links_.links.enabled}},
        {"links.how", links_.how},
        {"links.intra_bandwidth_gbps", links_.links.intra.bandwidth_gbps},
        {"links.inter_bandwidth_gbps", links_.links.inter.bandwidth_gbps},
        {"links.intra_latency_us", links_.links.intra.latency_us},
        {"links.inter_latency_us", links_.links.inter.latency_us},
        {"stability.spike_window", o_.spike_window},
        {"stability.spike_threshold", o_.spike_threshold},
        {"parallel.pp", std::int64_t{s_.dims.pp}},
        {"parallel.dp_replicate", std::int64_t{s_.dims.dp_replicate}},
        {"parallel.dp_shard", std::int64_t{s_.dims.dp_shard}},
        {"parallel.cp", std::int64_t{s_.dims.cp}},
        {"parallel.tp", std::int64_t{s_.dims.tp}},
        {"parallel.ep", std::int64_t{s_.dims.ep}},
    };
    if (ctx_.phantom) {
      // docs/phantom.md: one process ran rank phantom.rank of phantom.world_size; its loss is on stand-in data.
      a.emplace_back("phantom", std::int64_t{1});
      a.emplace_back("phantom.world_size", std::int64_t{ctx_.world_size});
      a.emplace_back("phantom.rank", std::int64_t{ctx_.rank});
      a.emplace_back("loss.comparable", std::int64_t{0});
    }
    if (mpi_world_) a.emplace_back("collectives.transport_used", std::string(coll::transport_name(mpi_world_->transport())));
    else if (world_) a.emplace_back("collectives.transport_used", std::string("nccl"));
    // Row i of the steps/* and ranks/* series is step first_step + i: a resumed run's file starts at the stored step
    // + 1 and names what it continues (a new file: the results of the run it continues are never rewritten).
    a.emplace_back("first_step", first_step_);
    if (resume_ != nullptr) {
      const CheckpointMeta& m = resume_->meta();
      a.emplace_back("resumed_from", resume_->path().string());
      a.emplace_back("resumed_from_step", m.step);
      a.emplace_back("resumed_from_results", m.results_file);
      a.emplace_back("resumed_from_scheduler", m.scheduler);
      a.emplace_back("resumed_from_world_size", m.world_size);
    }
    if (s_.dims.pp > 1) a.emplace_back("parallel.pipeline", pipeline_text());
    if (s_.dims.cp > 1) a.emplace_back("parallel.context", context_text());
    if (gemm_.flops_per_s > 0) {
      a.emplace_back("device.gemm_flops_per_s_rank0", gemm_.flops_per_s);
      a.emplace_back("device.gemm_shape", gemm_.shape_text());
    }
    if (mean_rate_ > 0) {
      a.emplace_back("compute.model_flops_per_s", mean_rate_);
      a.emplace_back("compute.micro_batch_s", max_micro_batch_s_);
      a.emplace_back("compute.agreement", std::string("mean rate and max micro-batch time over ranks"));
      a.emplace_back("links.intra_flop_per_byte", links_.intra_flop_per_byte);
      a.emplace_back("links.inter_flop_per_byte", links_.inter_flop_per_byte);
    }
    if (const auto ref = source_.reference_losses()) {
      a.emplace_back("entropy_floor", ref->floor);
      a.emplace_back("entropy_rate", ref->entropy_rate);
      a.emplace_back("unigram_entropy", ref->unigram_entropy);
      loss_floor_ = ref->floor;
    }
    results_->post([a = std::move(a)](ResultsWriter& w) {
      for (const auto& [k, v] : a) w.set_attribute(k, v);
      w.flush();
    });
  }

  // The pipeline's schedule and cut, and where the ends went: "1f1b, 2 stages; stage 0: units [0,5); stage 1:
  // units [5,10); the embedding (unit 0) on stage 0, the head (unit 9) on stage 1".
  std::string pipeline_text() const {
    const int units = model_->layout().num_units();
    const schedulers::PipelineLayout l = schedulers::pipeline_layout_from(s_.sched, units);
    const workloads::StageCut first = l.cut(0);
    return std::string(schedulers::to_string(s_.sched.schedule)) + ", " + std::to_string(l.pp) + " stages" +
           (l.v > 1 ? " of " + std::to_string(l.v) + " chunks" : "") + "; " + l.describe() +
           "; the embedding (unit 0) on stage " + std::to_string(first.stage_of_unit.front()) + ", the head (unit " +
           std::to_string(units - 1) + ") on stage " + std::to_string(first.stage_of_unit.back());
  }

  // How context parallelism cut the sequences: "cp = 2: every sequence of 1024 tokens in 4 chunks of 256, rank r of
  // the group holding chunks r and 3 - r (512 tokens); ring attention over the cp group".
  std::string context_text() const {
    const workloads::ContextShard shard(s_.model->seq_len(), s_.dims.cp, 0);
    return "cp = " + std::to_string(s_.dims.cp) + ": every sequence of " + std::to_string(shard.seq_len()) +
           " tokens in " + std::to_string(2 * s_.dims.cp) + " chunks of " + std::to_string(shard.chunk_len()) +
           ", rank r of the group holding chunks r and " + std::to_string(2 * s_.dims.cp - 1) + " - r (" +
           std::to_string(shard.local_len()) + " tokens); ring attention over the cp group";
  }

  void print_header() {
    if (!root_) return;
    std::printf("# %s; %lld parameters; scheduler %s on %s\n", model_->describe().c_str(),
                static_cast<long long>(s_.model->num_params()), std::string(scheduler_->name()).c_str(),
                ctx_.topology.summary().c_str());
    std::printf("# peak %s\n# links: %s\n", peak_text_.c_str(), links_.how.c_str());
    if (ctx_.threads.intra_op > 1)
      std::printf("# threads: %d per rank in the intra-op pool (harness.cpu_threads; OpenBLAS single-threaded in each "
                  "range), %s kernels (%d ranks on %d cores)\n",
                  ctx_.threads.intra_op, blas_core_name().c_str(), ctx_.threads.ranks_on_machine, ctx_.threads.cores);
    else
      std::printf("# threads: OpenBLAS %d per rank%s, %s kernels (%d ranks on %d cores)\n", ctx_.threads.openblas,
                  ctx_.threads.openblas_set ? ", set by hzpbench" : "", blas_core_name().c_str(),
                  ctx_.threads.ranks_on_machine, ctx_.threads.cores);
    if (const std::string note = narrower_blas_core_note(); !note.empty()) std::printf("# note: %s\n", note.c_str());
    if (s_.dims.pp > 1) std::printf("# pipeline: %s\n", pipeline_text().c_str());
    if (s_.dims.cp > 1) std::printf("# context: %s\n", context_text().c_str());
    if (resume_ != nullptr)
      std::printf("# resumed from %s (after step %lld, written by %s at %lld ranks)\n", resume_->path().c_str(),
                  static_cast<long long>(resume_->meta().step + 1), resume_->meta().scheduler.c_str(),
                  static_cast<long long>(resume_->meta().world_size));
    if (o_.checkpoint_every > 0)
      std::printf("# checkpoints: every %lld steps and on SIGTERM/SIGINT/SIGUSR1 (then exit 5, preempted)\n",
                  static_cast<long long>(o_.checkpoint_every));
    else if (checkpoints_.enabled())
      std::printf("# checkpoints: on SIGTERM/SIGINT/SIGUSR1 only (then exit 5, preempted)\n");
    if (loss_floor_ >= 0) std::printf("# data: loss floor %.6g nats/token (synthetic source)\n", loss_floor_);
    std::printf("# results: %s\n", results_->path().c_str());
    std::fflush(stdout);
  }

  void write_checkpoint_after(std::int64_t step) {
    progress_.beat(step, "writing a checkpoint");
    CheckpointMeta meta;
    meta.step = step;
    meta.seed = static_cast<std::int64_t>(s_.train.seed);
    meta.precision = std::string(workloads::to_string(s_.train.precision));
    meta.scheduler = std::string(scheduler_->name());
    meta.world_size = ctx_.world_size;
    meta.global_batch = s_.train.global_batch;
    meta.results_file = results_path_;
    const std::filesystem::path p =
        checkpoints_.write(MPI_COMM_WORLD, *scheduler_, s_.model->layout(), s_.model->describe(), meta);
    if (root_) {
      results_->post([p = p.string(), step](ResultsWriter& w) {
        w.set_attribute("checkpoint.last", p);
        w.set_attribute("checkpoint.last_step", step);
        w.flush();
      });
      std::printf("checkpoint: %s (after step %lld)\n", p.c_str(), static_cast<long long>(step + 1));
      std::fflush(stdout);
    }
  }

  // ---- 7. one step ---------------------------------------------------------------------------------
  bool step_once(std::int64_t step) {
    progress_.beat(step, "before the step");
    if (o_.throw_at.hits(ctx_.rank, step))
      throw std::runtime_error("debug.throw_at: injected failure on rank " + std::to_string(ctx_.rank) +
                               " before step " + std::to_string(step));
    if (o_.stall_at.hits(ctx_.rank, step)) {
      progress_.beat(step, "stalled by debug.stall_at");
      for (;;) sleep_s(0.05);  // no heartbeat from here: the watchdog ends the job
    }

    progress_.beat(step, "in scheduler.step");
    meter_->begin();
    const schedulers::StepStats st = scheduler_->step({step, &source_});
    RankSample mine = meter_->end(st);
    if (o_.nan_at == step) mine[StepField::loss] = std::numeric_limits<double>::quiet_NaN();
    if (recorder_ && world_) recorder_->add_collectives(meter_->last_records(), world_->counters());

    progress_.beat(step, "gathering metrics");
    std::vector<RankSample> all(static_cast<std::size_t>(ctx_.world_size));
    ctx_.harness->all_gather(ConstTensorView(mine.v.data(), Shape{static_cast<std::int64_t>(RankSample::kWidth)}, DType::f64),
                             TensorView(all.data(), Shape{static_cast<std::int64_t>(RankSample::kWidth) * ctx_.world_size},
                                        DType::f64),
                             StreamRef::host());
    if (step == first_step_) record_model_state();

    // Every rank holds every sample, so every rank takes the same decision on a non-finite loss.
    StepRecord rec = aggregate_step(step, all, scale_);
    rec.loss_z = loss_spikes_.push(rec.loss);
    rec.grad_norm_z = grad_spikes_.push(rec.grad_norm);
    rec.loss_spike = loss_spikes_.is_spike(rec.loss_z);
    rec.grad_norm_spike = grad_spikes_.is_spike(rec.grad_norm_z);
    bool diverged = false;
    if (!std::isfinite(rec.loss)) {
      if (skipped_ < o_.skip_nonfinite) {
        ++skipped_;
        rec.skipped = true;
      } else {
        diverged = true;
      }
    }
    if (root_) {
      records_.push_back(rec);
      const std::int64_t total = s_.train.steps;
      const double flush_s = o_.flush_s;
      const std::int64_t first = first_step_;
      // The model's own per-step series (the MoE load per layer and expert, ...), as rank 0's model saw the step
      // end: its statistics are summed over the data-parallel group (one pipeline stage's layers under pp).
      std::vector<workloads::StepMetric> model_rows = model_->step_metrics();
      results_->post([rows = rows_, rec, all = std::move(all), total, flush_s, first,
                      model_rows = std::move(model_rows)](ResultsWriter& w) {
        rows->append(w, rec, all);
        for (const workloads::StepMetric& m : model_rows)
          w.append_row(SeriesSpec{"steps/" + m.name, m.units, m.meaning}, m.values);
        // The first step is in the file: the run has started cleanly, and under --force it now takes the
        // place of the file it replaces (written beside it until here).
        if (flush_s <= 0 || rec.step == first) w.flush();
        else w.flush_if_due(flush_s);
        if (rec.step == first) w.publish();
        std::printf("%s\n", format_progress(rec, total).c_str());
        std::fflush(stdout);
      });
    }
    if (diverged) {
      if (root_)
        std::fprintf(stderr, "hzpbench: step %lld: the loss is %g: stopping as diverged (harness.skip_nonfinite = %lld)\n",
                     static_cast<long long>(step), rec.loss, static_cast<long long>(o_.skip_nonfinite));
      return false;
    }
    if (std::binary_search(s_.dump_steps.begin(), s_.dump_steps.end(), step)) {
      progress_.beat(step, "dumping tensors");
      DumpVisitor v(root_ ? results_ : nullptr, step);
      scheduler_->visit_state(v);
    }
    return true;
  }

  void record_model_state() {
    const std::array<std::int64_t, 5> local = model_state_bytes(*alloc_);
    std::array<double, 5> mine{};
    for (std::size_t i = 0; i < 5; ++i) mine[i] = static_cast<double>(local[i]);
    std::vector<double> all(5 * static_cast<std::size_t>(ctx_.world_size));
    ctx_.harness->all_gather(ConstTensorView(mine.data(), Shape{5}, DType::f64),
                             TensorView(all.data(), Shape{5 * ctx_.world_size}, DType::f64), StreamRef::host());
    model_state_ = local;
    if (!root_) return;
    std::vector<std::int64_t> values(all.begin(), all.end());
    const std::int64_t w = ctx_.world_size;
    results_->post([values = std::move(values), w](ResultsWriter& wr) {
      const SeriesSpec spec{"memory/model_state_bytes", "bytes",
                            "persistent model state per rank and component, requested bytes by allocation tag, "
                            "read after step 0"};
      const std::int64_t shape[2] = {w, 5};
      wr.write_array(spec, shape, values);
      wr.set_dataset_attribute("memory/model_state_bytes", "components",
                               std::vector<std::string>(std::begin(kStateComponents), std::end(kStateComponents)));
    });
  }

  // ---- 8. the end ----------------------------------------------------------------------------------
  enum class Outcome { ok, diverged, preempted };
  int finish(Outcome outcome, int signo, std::int64_t last_step) {
    const bool diverged = outcome == Outcome::diverged;
    progress_.beat(s_.train.steps, "finishing");
    ctx_.harness->barrier();  // every rank got here: none failed
    if (recorder_) {
      trace::install(nullptr);
      // Only rank 0 holds the results file (and writes the trace); the others just send their events.
      const std::string path = root_ ? trace_path_for(results_->path().string()) : std::string();
      const bool wrote = gather_and_write_trace(*recorder_, *ctx_.harness, origin_s_, path);
      if (wrote) std::printf("trace: %s (%zu events dropped)\n", path.c_str(), recorder_->dropped());
    }
    const int code = outcome == Outcome::preempted ? kExitPreempted : diverged ? kExitDiverged : kExitOk;
    const auto shm_counts = shm_messages_job();  // collective over the ranks
    if (!root_) return code;
    results_->post(shm_counts);

    SummaryContext sc;
    sc.world_size = ctx_.world_size;
    sc.warmup_steps = o_.warmup_steps;
    sc.first_step = first_step_;
    sc.peak_text = peak_text_;
    sc.active_only = scale_.active_only;
    sc.loss_floor = loss_floor_;
    sc.model_state = model_state_;
    sc.spike_window = o_.spike_window;
    sc.spike_threshold = o_.spike_threshold;
    if (ctx_.phantom) sc.phantom_rank = ctx_.rank;
    const std::string summary = format_summary(records_, sc);
    results_->post(summary_attributes_job());
    const RunStatus status =
        outcome == Outcome::preempted
            ? RunStatus::preempted(signal_name(signo) + " after step " + std::to_string(last_step + 1) + "; checkpoint " +
                                   checkpoints_.last().string() + " (hzpbench run --resume it)")
            : diverged ? RunStatus::diverged() : RunStatus::ok();
    results_->finish(status);
    std::printf("%s", summary.c_str());
    std::printf("status: %s\nresults: %s\n", status.text().c_str(), results_->path().c_str());
    std::fflush(stdout);
    return code;
  }

  /// How the run's messages crossed the shared-memory transport, summed over the ranks (collective over them):
  /// `comm.shm_messages.slots`, `.single_copy`, `.mapped` (collectives.mapped_buffers) and `.ended_early`.
  ResultsThread::Job shm_messages_job() const {
    const coll::ShmMessageCounts c = coll::shm_message_counts();
    // One exact integer sum of the four counts.
    std::int64_t n[4] = {static_cast<std::int64_t>(c.slots), static_cast<std::int64_t>(c.single_copy),
                         static_cast<std::int64_t>(c.mapped), static_cast<std::int64_t>(c.ended_early)};
    ctx_.harness->all_reduce(TensorView(n, Shape{4}, DType::i64), coll::ReduceOp::sum, StreamRef::host());
    std::vector<std::pair<std::string, AttrValue>> a;
    const char* names[4] = {"slots", "single_copy", "mapped", "ended_early"};
    for (int i = 0; i < 4; ++i) a.emplace_back(std::string("comm.shm_messages.") + names[i], n[i]);
    return [a = std::move(a)](ResultsWriter& w) {
      for (const auto& [k, v] : a) w.set_attribute(k, v);
    };
  }

  ResultsThread::Job summary_attributes_job() const {
    std::vector<double> t, tps, mfu, mfuc, comm;
    std::int64_t spikes = 0, gspikes = 0;
    for (const StepRecord& r : records_) {
      spikes += r.loss_spike;
      gspikes += r.grad_norm_spike;
      if (r.step < first_step_ + o_.warmup_steps || r.skipped) continue;
      t.push_back(r.step_time_s);
      tps.push_back(r.tokens_per_s);
      mfu.push_back(r.mfu);
      mfuc.push_back(r.mfu_causal);
      comm.push_back(r.exposed_comm_frac);
    }
    std::vector<std::pair<std::string, AttrValue>> a = {
        {"summary.measured_steps", static_cast<std::int64_t>(t.size())},
        {"summary.step_time_median_s", percentile(t, 50)},
        {"summary.step_time_p5_s", percentile(t, 5)},
        {"summary.step_time_p95_s", percentile(t, 95)},
        {"summary.step_time_p99_s", percentile(t, 99)},
        {"summary.tokens_per_s_median", percentile(tps, 50)},
        {"summary.mfu_median", percentile(mfu, 50)},
        {"summary.mfu_causal_median", percentile(mfuc, 50)},
        {"summary.exposed_comm_frac_median", percentile(comm, 50)},
        {"summary.loss_spikes", spikes},
        {"summary.grad_norm_spikes", gspikes},
        {"summary.skipped_steps", skipped_},
    };
    return [a = std::move(a)](ResultsWriter& w) {
      for (const auto& [k, v] : a) w.set_attribute(k, v);
    };
  }

  static std::string fmt_rate(double flops) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.4g GFLOP/s", flops / 1e9);
    return buf;
  }

  const RunSetup& s_;
  const RunOptions& o_;
  RunContext& ctx_;
  ResultsThread* results_;  // rank 0 only
  Progress& progress_;
  const workloads::DataSource& source_;
  std::atomic<coll::CommCounters*>& scheduler_counters_;
  const bool root_;

  std::unique_ptr<MemoryBacking> backing_;  // host, or CudaBacking on cuda:0 (backend = cuda)
  Stream stream_;                            // the compute stream: the host's, or a CUDA stream
  std::unique_ptr<workloads::Workload> model_;
  std::unique_ptr<CachingAllocator> alloc_;
  std::unique_ptr<TraceRecorder> recorder_;
  std::unique_ptr<coll::Communicator> world_;  // the scheduler's: MPI, or NCCL with backend = cuda
  coll::MpiCommunicator* mpi_world_ = nullptr;  // world_ when it is MPI's (its transport is recorded)
  std::unique_ptr<schedulers::ProcessGroups> groups_;  // the scheduler's and the tensor-parallel model's
  std::unique_ptr<schedulers::Scheduler> scheduler_;
  std::unique_ptr<StepMeter> meter_;
  std::shared_ptr<ResultsRows> rows_;
  StepScale scale_;

  double origin_s_ = 0;
  double peak_flops_ = 0;
  std::string peak_source_, peak_text_;
  GemmPeak gemm_;
  std::optional<ModelRate> rate_;
  double mean_rate_ = 0, max_micro_batch_s_ = 0;
  LinkPlan links_;
  double loss_floor_ = -1;
  std::array<std::int64_t, 5> model_state_{};
  SpikeDetector loss_spikes_{o_.spike_window, o_.spike_threshold};
  SpikeDetector grad_spikes_{o_.spike_window, o_.spike_threshold};
  std::int64_t skipped_ = 0;
  std::vector<StepRecord> records_;  // rank 0
  ResumeSource* resume_;
  RunCheckpoints& checkpoints_;
  const std::atomic<int>& stop_signal_;
  std::int64_t first_step_ = 0;  // the stored step + 1 when resumed
  std::string results_path_;     // every rank's copy (the checkpoints name it)

 public:
  void set_results_path(std::string p) { results_path_ = std::move(p); }
};

// A bad input every rank sees alike: rank 0 prints it once, every rank exits 2.
[[noreturn]] void bad_input(const Error& e, bool print) {
  const char* kind = e.code() == ErrorCode::config ? "config error: " : e.code() == ErrorCode::data ? "data error: " : "";
  throw RunExit(kExitBadInput, kind + e.message(), print);
}

}  // namespace

int run_main(const RunCliArgs& args, const std::vector<std::string>& argv) {
  MpiSession mpi;
  int world = mpi.size();
  const bool root = mpi.rank() == 0;

  // ---- 1. configuration -----------------------------------------------------------------------------
  std::optional<ResolvedConfig> cfg;
  std::optional<RunSetup> setup;
  PhantomSpec phantom;
  try {
    cfg.emplace(resolve_run_config(args, world));
    // A phantom run (docs/phantom.md) plans for its phantom world: the configuration is resolved again for it.
    phantom = phantom_spec(*cfg, world);
    if (phantom.on()) {
      world = phantom.world;
      cfg.emplace(resolve_run_config(args, world));
    }
    setup.emplace(plan_run(*cfg, world, args.dump_tensors));
    apply_phantom(*setup, phantom, !args.resume.empty());
  } catch (const Error& e) {
    bad_input(e, root);
  }
  const RunOptions& opt = setup->opt;
  if (root) {
    std::printf("# hzpbench run: %d rank%s; resolved configuration (each value's origin as a comment):\n%s", world,
                world == 1 ? "" : "s", cfg->to_toml(true).c_str());
    for (const std::string& n : setup->notes) std::printf("# note: %s\n", n.c_str());
    std::fflush(stdout);
  }

  // ---- 1b. the checkpoint to resume from: opened and checked (format, model, tensor table, checksums, precision)
  // before anything is created, so that a bad one is bad input (exit 2, no results file).
  std::unique_ptr<ResumeSource> resume;
  try {
    if (!args.resume.empty()) {
      check_checkpoint_support(*setup, "--resume " + args.resume);
      resume = std::make_unique<ResumeSource>(MPI_COMM_WORLD, args.resume, setup->model->layout(),
                                              setup->model->describe(),
                                              std::string(workloads::to_string(setup->train.precision)));
      if (resume->meta().step + 1 >= setup->train.steps)
        HZP_THROW(ConfigError, "--resume ", args.resume, ": the checkpoint is after step ", resume->meta().step + 1,
                  " and train.steps = ", setup->train.steps, ", so nothing is left to run. Fix: --set train.steps=N "
                  "with N > ", resume->meta().step + 1);
    }
  } catch (const Error& e) {
    bad_input(e, root);
  }

  // ---- 2. data ----------------------------------------------------------------------------------------
  std::unique_ptr<workloads::DataSource> source;
  try {
    source = workloads::make_data_source(setup->data);
  } catch (const Error& e) {
    bad_input(e, root);
  }

  // ---- 3. context -------------------------------------------------------------------------------------
  RunContext ctx = RunContext::create(*setup, static_cast<int>(cfg->get_int("topology.ranks_per_node")), phantom.world,
                                      phantom.rank);

  // ---- 4. the results file, on rank 0's results thread -----------------------------------------------
  // Only rank 0 names and creates the file. The default name is the time to the second and the
  // configuration, which runs started together share: the next free "-<n>" is then taken (creation is
  // exclusive, so two runs never write one file).
  const std::string default_path = opt.output_path.empty() ? default_output_path(*cfg, unix_seconds()) : std::string();
  std::string path = opt.output_path.empty() ? default_path : opt.output_path;
  std::unique_ptr<ResultsThread> results;
  std::string create_error;
  if (root) {
    for (int n = 2;; ++n) {
      try {
        check_output_path(path, opt.force);
        results = std::make_unique<ResultsThread>(path, make_run_info(argv, *cfg, *setup, ctx, *source), opt.force,
                                                  ctx.control.get(), opt.flush_s);
        break;
      } catch (const std::exception& e) {
        if (!default_path.empty() && n < 1000 && std::filesystem::exists(path)) {
          path = numbered_path(default_path, n);
          continue;
        }
        create_error = failure_message(e);
        break;
      }
    }
  }
  path = broadcast_string(*ctx.harness, path);
  create_error = broadcast_string(*ctx.harness, create_error);
  if (!create_error.empty())
    throw RunExit(kExitBadInput, root ? create_error : std::string(), root);

  // ---- 5.-8. the run ----------------------------------------------------------------------------------
  Progress progress;
  std::atomic<coll::CommCounters*> scheduler_counters{nullptr};
  const int rank = ctx.rank;
  auto on_stall = [&](double idle) {
    // The scheduler's communicators are not torn down under us: the job ends from here.
    std::array<coll::CommCounters*, 2> counters = {scheduler_counters.load(), &ctx.harness->counters()};
    char head[256];
    const bool waiting = progress.in_comm_wait();
    std::snprintf(head, sizeof head, "watchdog: no progress for %.1f s (harness.watchdog_s = %g) at step %lld, %s%s; ",
                  idle, opt.watchdog_s, static_cast<long long>(progress.step()), progress.where(),
                  waiting ? ", waiting in a collective for its peers" : "");
    FailureReport rep;
    rep.rank = rank;
    rep.exit_code = kExitFailed;
    rep.kind = FailureReport::Kind::watchdog;
    rep.last_progress_unix_s = progress.last_unix_s();
    rep.waiting_on_peers = waiting;
    rep.message = std::string(head) + last_collectives_text(counters, kWatchdogCollectives);
    std::fprintf(stderr, "hzpbench: rank %d: %s\n", rank, rep.message.c_str());
    if (results) results->report_failure(rep, true);
    else ctx.control->send(rep, 10);
    wait_for_abort(kExitFailed);
  };
  Watchdog watchdog(opt.watchdog_s, progress, on_stall);
  // With checkpointing on, a signal only asks the loop to stop: the ranks agree on it after the step in flight,
  // checkpoint and end as preempted. The step's time bounds the delay; a second signal still ends at once.
  std::atomic<int> stop_signal{0};
  auto on_signal = [&](int signo) {
    if (opt.checkpoints_on()) {
      stop_signal.store(signo);
      std::fprintf(stderr, "hzpbench: rank %d: %s caught during step %lld: checkpointing after the step in flight, "
                   "then stopping (a second signal ends at once)\n", rank, signal_name(signo).c_str(),
                   static_cast<long long>(progress.step()));
      return;
    }
    FailureReport rep;
    rep.rank = rank;
    rep.exit_code = exit_code_for_signal(signo);
    rep.kind = FailureReport::Kind::signal;
    rep.last_progress_unix_s = progress.last_unix_s();
    rep.message = "terminated by " + signal_name(signo) + " during step " + std::to_string(progress.step());
    std::fprintf(stderr, "hzpbench: rank %d: %s; ending the run (a second signal ends it at once)\n", rank,
                 rep.message.c_str());
    // The step in flight is abandoned: every completed step is in the file, or on its way in the queue
    // that rank 0's results thread writes before the status.
    if (results) results->report_failure(rep, true);
    else ctx.control->send(rep, 10);
    wait_for_abort(rep.exit_code);
  };
  SignalStop signals(on_signal);
  // The run's steps execute on this thread: let the collectives tell the watchdog when it waits on peers.
  struct ObserveCommWaits {
    explicit ObserveCommWaits(std::atomic<int>* c) noexcept { coll::observe_comm_waits(c); }
    ~ObserveCommWaits() { coll::observe_comm_waits(nullptr); }
  } observe(progress.comm_wait_counter());
  try {
    RunCheckpoints checkpoints(opt, path, root);
    Run run(*setup, ctx, results.get(), progress, *source, scheduler_counters, resume.get(), checkpoints, stop_signal);
    run.set_results_path(path);
    const int code = run.execute();
    if (code == kExitPreempted && world > 1) {
      // mpiexec (MPICH's hydra, measured) exits 0 after forwarding a signal to ranks that then end normally, so
      // the preempted code is delivered as the failure path delivers its codes: an abort, once every rank is done
      // and rank 0 has closed the results file (finish() joined its thread). The watchdog still guards the barrier.
      progress.beat(setup->train.steps, "agreeing on the preempted exit");
      ctx.harness->barrier();
      watchdog.stop();
      if (root) abort_job(code);
      wait_for_abort(code);
    }
    watchdog.stop();
    return code;
  } catch (const RunExit&) {
    throw;
  } catch (const std::exception& e) {
    watchdog.stop();
    const FailureReport rep = FailureReport::from_exception(rank, e, progress.last_unix_s());
    // A failed write to the results file was reported (once) by the results thread itself.
    if (!(root && results->reported_own_failure())) std::fprintf(stderr, "hzpbench: rank %d: %s\n", rank, e.what());
    if (root) {
      results->report_failure(rep, world > 1);  // at one rank: returns once the status is written
      if (world > 1) wait_for_abort(rep.exit_code);
      throw RunExit(rep.exit_code, {}, false);
    }
    ctx.control->send(rep, 10);
    wait_for_abort(rep.exit_code);
  }
}

}  // namespace hzp::harness
