// What one rank computes per second, measured once at the start of a run: the declared peak for MFU (a
// device table for known GPUs; on the CPU an sgemm on a model-like shape) and the model's achieved rate
// on a calibration micro-batch, which link profiles turn into emulated bandwidths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/schedulers/step/unit_sleep.hpp"
#include "hzp/workloads/data_source.hpp"
#include "hzp/workloads/train_config.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::harness {

/// Dense bf16 peak (TFLOP/s) of a GPU whose name contains a known model (H100, H200, GH200, A100), or
/// nullopt.
std::optional<double> gpu_peak_tflops(std::string_view device_name);

/// A GEMM peak measurement: C[m, n] = A[m, k]·B[k, n]ᵀ in fp32 through the kernels' gemm.
struct GemmPeak {
  double flops_per_s = 0;
  std::int64_t m = 0, n = 0, k = 0;
  int openblas_threads = 1;
  int intra_op_threads = 1;  ///< the pool's threads (each GEMM split over them, OpenBLAS single-threaded)
  std::string shape_text() const;
  /// "1 OpenBLAS thread(s)", or "2 intra-op thread(s) at one thread's CPU-time rate": whose GEMMs the peak stands for
  /// (with more than one thread, one thread's rate in its own CPU time times the threads).
  std::string threads_text() const;
};

/// The GEMM shape the CPU peak is measured on: the model's widest linear layer over one micro-batch
/// (tokens × ffn_hidden × hidden), each side clamped to [256, 2048] so that tiny models still measure
/// the machine rather than call overhead and big ones stay quick.
struct GemmShape {
  std::int64_t m = 512, n = 512, k = 512;
};
GemmShape model_like_gemm_shape(std::int64_t tokens, std::int64_t hidden, std::int64_t ffn_hidden);

/// Best rate over repeated sgemms of `shape` (at least 3 runs and ~0.15 s), timed by thread CPU time
/// when OpenBLAS runs one thread (so descheduling on an oversubscribed machine does not count) and by
/// wall time otherwise.
GemmPeak measure_gemm_peak(const GemmShape& shape);

/// The model's achieved compute on this rank.
struct ModelRate {
  /// Model FLOPs (full-attention convention) per second of thread CPU time (of wall time when OpenBLAS
  /// runs its own threads, whose time the calling thread's clock does not see).
  double flops_per_s = 0;
  double micro_batch_s = 0;  ///< wall seconds of one micro-batch's forward + backward
  std::int64_t micro_batches = 0;  ///< timed (after one untimed warm-up)
  /// Wall seconds of each unit's forward and backward, mean over the timed micro-batches (the calibration of
  /// `hzpbench simulate`).
  std::vector<double> unit_forward_s, unit_backward_s;
};

/// Runs 1 + `timed` micro-batches (forward and backward of every unit, step 0's first micro-batches of
/// `source`) on freshly initialised parameters in private memory that is freed on return, so that the
/// run's own allocator statistics do not see it. Thread CPU time over the timed ones gives the rate.
/// With `sleep` (the benchmark hook scheduler.debug_unit_sleep_ms) every block sleeps as in the run's step, and
/// the sleeps count as compute: in the unit times, the micro-batch and the rate (a sleep is no CPU time, so it is
/// added to it), so that the links a run derives from the rate and the unit times `simulate` charges both see the
/// unit time the run's step takes.
ModelRate measure_model_rate(const workloads::Workload& model, const workloads::TrainConfig& train,
                             const workloads::DataSource& source, int timed = 1,
                             schedulers::UnitSleep sleep = {});

}  // namespace hzp::harness
