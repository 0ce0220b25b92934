// Rank 0's view of each step (every rank's sample aggregated: max step time, tokens/s, MFU, the mean
// closure, spikes) and the end-of-run summary: medians and p5/p95/p99 over the measured steps (warm-up
// and skipped steps excluded, and said so), spread across ranks, stability.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "metrics.hpp"

namespace hzp::harness {

/// Loss / gradient-norm spikes: a value more than `threshold` standard deviations above the mean of the
/// previous `window` finite values (at least 5 of them) is a spike.
class SpikeDetector {
 public:
  SpikeDetector(std::int64_t window, double threshold) : window_(window), threshold_(threshold) {}
  /// The z-score of `x` against the trailing window (NaN while fewer than 5 values are known), then `x`
  /// joins the window when finite.
  double push(double x);
  bool is_spike(double z) const noexcept { return z > threshold_; }

 private:
  std::int64_t window_;
  double threshold_;
  std::deque<double> values_;
};

/// What the model and the device make of a step's numbers.
struct StepScale {
  int world_size = 1;
  double flops_per_token_full = 0;    ///< model FLOPs per trained token, attention not discounted
  double flops_per_token_causal = 0;  ///< the same with the attention term halved
  double peak_flops_per_rank = 0;     ///< the declared peak MFU is measured against (FLOP/s)
  bool active_only = false;           ///< the FLOPs count only the parameters a token uses (MoE)
};

/// One step as rank 0 records it.
struct StepRecord {
  std::int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0, clip_coefficient = 1;
  double tokens = 0;
  double retries = 0;           ///< deterministic mode: reruns of the step (fixed-point range), else 0
  double step_time_s = 0;       ///< max over ranks
  double tokens_per_s = 0;      ///< global tokens / step_time_s
  double model_flops = 0;       ///< tokens × FLOPs per token (full-attention convention)
  double mfu = 0, mfu_causal = 0;
  double exposed_comm_frac = 0; ///< mean over ranks of exposed_comm_s / step_time_s
  double rank_spread = 0;       ///< (max − min) / median of the ranks' step times
  double mem_peak_max = 0;      ///< max over ranks of mem_peak_bytes
  double loss_z = 0, grad_norm_z = 0;
  bool loss_spike = false, grad_norm_spike = false;
  bool skipped = false;         ///< non-finite loss tolerated by harness.skip_nonfinite
  std::array<double, kNumRankFields> mean{};  ///< every rank field, mean over ranks
};

/// Aggregates the gathered samples (one per rank) of one step.
StepRecord aggregate_step(std::int64_t step, std::span<const RankSample> samples, const StepScale& scale);

/// Linear-interpolation percentile (q in [0, 100]) of `values` (copied and sorted); NaN when empty.
double percentile(std::vector<double> values, double q);

/// Everything the summary states besides the steps.
struct SummaryContext {
  int world_size = 1;
  std::int64_t warmup_steps = 0;
  std::int64_t first_step = 0;     ///< the run's first step (the stored step + 1 when resumed): warm-up counts from it
  std::string peak_text;           ///< "61.2 GFLOP/s per rank (measured: sgemm 512x512x256, 1 thread)"
  bool active_only = false;        ///< the model FLOPs count only each token's active parameters (MoE)
  double loss_floor = -1;          ///< the synthetic source's floor (nats/token), < 0 when unknown
  std::array<std::int64_t, 5> model_state{};  ///< rank 0's (a phantom run's: its rank's) param, grad, master, m, v bytes
  std::int64_t spike_window = 20;
  double spike_threshold = 4;
  int phantom_rank = -1;           ///< >= 0: a phantom run of this rank (docs/phantom.md); its loss is not comparable
};

/// The multi-line summary rank 0 prints at the end.
std::string format_summary(std::span<const StepRecord> steps, const SummaryContext& ctx);

/// "12.3 MiB" style byte counts for the progress line and the summary.
std::string human_bytes(double bytes);

}  // namespace hzp::harness
