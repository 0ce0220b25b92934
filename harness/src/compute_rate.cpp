// Measured compute rates (compute_rate.hpp): the GPU peak table, the CPU sgemm peak, and a calibration
// micro-batch of the model through the workload interface.
#include "hzp/harness/compute_rate.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/intra_op.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::harness {
namespace {

struct GpuPeak {
  const char* contains;
  double tflops;  // dense bf16, SXM parts
};
// Longest names first, so that "GH200" is not read as "H200".
constexpr GpuPeak kGpuPeaks[] = {{"GH200", 989}, {"H200", 989}, {"H100", 989}, {"A100", 312}};

std::int64_t clamp_dim(std::int64_t v) { return std::clamp<std::int64_t>(v, 256, 2048); }

}  // namespace

std::optional<double> gpu_peak_tflops(std::string_view name) {
  for (const GpuPeak& g : kGpuPeaks)
    if (name.find(g.contains) != std::string_view::npos) return g.tflops;
  return std::nullopt;
}

std::string GemmPeak::shape_text() const {
  return "sgemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

std::string GemmPeak::threads_text() const {
  const std::string who = intra_op_threads > 1 ? std::to_string(intra_op_threads) + " intra-op thread(s)"
                                               : std::to_string(openblas_threads) + " OpenBLAS thread(s)";
  return std::max(intra_op_threads, openblas_threads) > 1 ? who + " at one thread's CPU-time rate" : who;
}

namespace {

// Thread CPU time leaves out descheduling on oversubscribed cores, but it also leaves out the work of every
// other thread: it is the measure only when the calling thread is the only one computing.
bool one_compute_thread() { return openblas_get_num_threads() == 1 && core::intra_op_threads() == 1; }

}  // namespace

GemmShape model_like_gemm_shape(std::int64_t tokens, std::int64_t hidden, std::int64_t ffn_hidden) {
  return {clamp_dim(tokens), clamp_dim(ffn_hidden), clamp_dim(hidden)};
}

GemmPeak measure_gemm_peak(const GemmShape& shape) {
  GemmPeak r;
  r.m = shape.m;
  r.n = shape.n;
  r.k = shape.k;
  r.openblas_threads = openblas_get_num_threads();
  r.intra_op_threads = core::intra_op_threads();
  std::vector<float> a(static_cast<std::size_t>(shape.m * shape.k)), b(static_cast<std::size_t>(shape.n * shape.k)),
      c(static_cast<std::size_t>(shape.m * shape.n));
  // Values do not matter for the rate, but denormals or NaNs could: small, ordinary numbers.
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(i % 97);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * static_cast<float>(i % 89);
  const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
  // One thread's rate in its own CPU time, times the threads that share a rank's GEMMs. Timing the threads
  // together by the wall clock measured the machine's load instead: one thread descheduled by other work stalls
  // every call, and beside a build the same run reported either the machine's rate or a quarter of it (then an
  // MFU above 100%), depending on where the scheduler put the threads at start-up. Thread CPU time leaves
  // descheduling out; on an idle machine the two agree (2 x 98 against 196 GFLOP/s at 2048^3 on 2 cores).
  const int threads = std::max(r.openblas_threads, r.intra_op_threads);
  if (r.openblas_threads > 1) openblas_set_num_threads(1);
  double best = 0, spent = 0;
  // The best of as many calls as fit in 0.15 s (3 at least).
  for (int i = 0; i < 20000 && (i < 3 || spent < 0.15); ++i) {
    const Stopwatch sw;
    // C = A B^T, the layout of the model's linear layers (kernels::gemm(c, a, b, false, true)), on this thread.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(shape.m), static_cast<int>(shape.n),
                static_cast<int>(shape.k), 1.0f, a.data(), static_cast<int>(shape.k), b.data(),
                static_cast<int>(shape.k), 0.0f, c.data(), static_cast<int>(shape.n));
    const double t = sw.cpu();
    spent += sw.wall();
    if (t > 0) best = std::max(best, flops / t);
  }
  if (r.openblas_threads > 1) openblas_set_num_threads(r.openblas_threads);
  r.flops_per_s = best * threads;
  return r;
}

ModelRate measure_model_rate(const workloads::Workload& model, const workloads::TrainConfig& train,
                             const workloads::DataSource& source, int timed, schedulers::UnitSleep sleep) {
  HZP_CHECK(timed >= 1, "at least one timed micro-batch");
  HostBacking backing;
  CachingAllocator alloc(backing);
  const workloads::ParamLayout& layout = model.layout();
  const std::int64_t n = layout.total_numel();
  const workloads::Precision p = model.precision();
  const DType pd = workloads::param_dtype(p), gd = workloads::grad_dtype(p);

  Allocation params = alloc.allocate(static_cast<std::size_t>(n) * dtype_size(pd), AllocationTag::param);
  Allocation grads = alloc.allocate(static_cast<std::size_t>(n) * dtype_size(gd), AllocationTag::grad);
  const TensorView pv(params.data(), Shape{n}, pd), gv(grads.data(), Shape{n}, gd);
  if (pd == DType::f64) {
    model.init_params(0, std::span<double>(pv.as<double>(), static_cast<std::size_t>(n)), train.seed);
  } else if (pd == DType::f32) {
    model.init_params(0, std::span<float>(pv.as<float>(), static_cast<std::size_t>(n)), train.seed);
  } else {
    Allocation master = alloc.allocate(static_cast<std::size_t>(n) * sizeof(float), AllocationTag::master);
    const TensorView mv(master.data(), Shape{n}, DType::f32);
    model.init_params(0, std::span<float>(mv.as<float>(), static_cast<std::size_t>(n)), train.seed);
    kernels::cast(pv, mv, StreamRef::host());
  }

  auto ctx = model.make_context(alloc, {.micro_batch_size = train.micro_batch_size, .recompute = train.recompute});
  const workloads::BatchPlan plan(train.global_batch, train.micro_batch_size, 1);
  const auto tokens = static_cast<std::size_t>(train.micro_batch_size * model.seq_len());
  std::vector<std::int32_t> inputs(tokens), targets(tokens), first(source.packs_documents() ? tokens : 0);
  const double normaliser = static_cast<double>(train.global_batch * model.seq_len());
  const int units = layout.num_units();

  ModelRate r;
  r.unit_forward_s.assign(static_cast<std::size_t>(units), 0.0);
  r.unit_backward_s.assign(static_cast<std::size_t>(units), 0.0);
  const bool by_cpu = one_compute_thread();
  double cpu = 0, wall = 0;
  for (int i = 0; i <= timed; ++i) {
    const std::int64_t j = i % plan.micro_batches_per_step();
    if (first.empty())
      workloads::fill_micro_batch(source, plan, 0, j, inputs, targets);
    else
      workloads::fill_micro_batch(source, plan, 0, j, inputs, targets, first);  // the run's documents
    const Stopwatch sw;
    ctx->begin(inputs, targets, normaliser, first);
    // Each unit's own wall time too: `hzpbench simulate` charges every action with it.
    for (int u = 0; u < units; ++u) {
      const Stopwatch unit;
      model.forward(u, workloads::unit_params_from_flat(layout, u, pv), *ctx);
      sleep.after(u, units);
      if (i > 0) r.unit_forward_s[static_cast<std::size_t>(u)] += unit.wall() / timed;
    }
    for (int u = units - 1; u >= 0; --u) {
      const Stopwatch unit;
      model.backward(u, workloads::unit_params_from_flat(layout, u, pv), *ctx,
                     workloads::unit_grads_from_flat(layout, u, gv, true));
      sleep.after(u, units);
      if (i > 0) r.unit_backward_s[static_cast<std::size_t>(u)] += unit.wall() / timed;
    }
    if (i > 0) {  // the first one warms caches and the allocator
      double slept = 0;  // thread CPU time does not see a sleep; the wall time has it already
      for (int u = 0; u < units; ++u) slept += 2 * sleep.of(u, units);
      cpu += by_cpu ? sw.cpu() + slept : sw.wall();
      wall += sw.wall();
    }
  }
  ctx.reset();
  r.micro_batches = timed;
  r.micro_batch_s = wall / timed;
  const double flops = model.flops_per_token().full_attention * static_cast<double>(tokens) * timed;
  r.flops_per_s = cpu > 0 ? flops / cpu : 0;
  return r;
}

}  // namespace hzp::harness
