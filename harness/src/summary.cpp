// Step aggregation across ranks, spike statistics and the end-of-run summary (summary.hpp).
#include "summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

namespace hzp::harness {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "median 0.0123 s  p5 0.0119  p95 0.0131  p99 0.0135"
std::string spread_line(const std::vector<double>& v, const char* f, const char* unit) {
  return "median " + fmt(f, percentile(v, 50)) + unit + "  p5 " + fmt(f, percentile(v, 5)) + "  p95 " +
         fmt(f, percentile(v, 95)) + "  p99 " + fmt(f, percentile(v, 99));
}

}  // namespace

double SpikeDetector::push(double x) {
  double z = kNaN;
  if (values_.size() >= 5) {
    const double n = static_cast<double>(values_.size());
    const double mean = std::accumulate(values_.begin(), values_.end(), 0.0) / n;
    double var = 0;
    for (double v : values_) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / (n - 1));
    // A flat window (sd 0) makes any rise infinitely surprising; report it as such only if x rose.
    z = sd > 0 ? (x - mean) / sd : (x > mean ? std::numeric_limits<double>::infinity() : 0.0);
  }
  if (std::isfinite(x)) {
    values_.push_back(x);
    if (static_cast<std::int64_t>(values_.size()) > window_) values_.pop_front();
  }
  return z;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return buf;
}

StepRecord aggregate_step(std::int64_t step, std::span<const RankSample> samples, const StepScale& scale) {
  StepRecord r;
  r.step = step;
  const RankSample& s0 = samples.front();  // every rank reports the step's scalars alike
  r.loss = s0[StepField::loss];
  r.grad_norm = s0[StepField::grad_norm];
  r.lr = s0[StepField::lr];
  r.clip_coefficient = s0[StepField::clip_coefficient];
  r.tokens = s0[StepField::tokens];
  r.retries = s0[StepField::retries];
  std::vector<double> times;
  double exposed_frac = 0;
  for (const RankSample& s : samples) {
    const double t = s[RankField::step_time_s];
    times.push_back(t);
    r.step_time_s = std::max(r.step_time_s, t);
    r.mem_peak_max = std::max(r.mem_peak_max, s[RankField::mem_peak_bytes]);
    exposed_frac += t > 0 ? s[RankField::exposed_comm_s] / t : 0;
    for (int f = 0; f < kNumRankFields; ++f) r.mean[f] += s.v[f] / static_cast<double>(samples.size());
  }
  r.exposed_comm_frac = exposed_frac / static_cast<double>(samples.size());
  const double med = percentile(times, 50);
  r.rank_spread = med > 0 ? (*std::max_element(times.begin(), times.end()) - *std::min_element(times.begin(), times.end())) / med : 0;
  r.model_flops = r.tokens * scale.flops_per_token_full;
  if (r.step_time_s > 0) {
    r.tokens_per_s = r.tokens / r.step_time_s;
    const double peak = scale.peak_flops_per_rank * scale.world_size;
    if (peak > 0) {
      r.mfu = r.model_flops / r.step_time_s / peak;
      r.mfu_causal = r.tokens * scale.flops_per_token_causal / r.step_time_s / peak;
    }
  }
  return r;
}

std::string format_summary(std::span<const StepRecord> steps, const SummaryContext& ctx) {
  std::ostringstream os;
  std::vector<const StepRecord*> measured;
  std::int64_t skipped = 0, loss_spikes = 0, grad_spikes = 0;
  for (const StepRecord& s : steps) {
    if (s.skipped) ++skipped;
    loss_spikes += s.loss_spike;
    grad_spikes += s.grad_norm_spike;
    if (s.step >= ctx.first_step + ctx.warmup_steps && !s.skipped) measured.push_back(&s);
  }
  os << "summary: " << steps.size() << " steps run; ";
  if (measured.empty()) {
    os << "none measured (all " << std::min<std::int64_t>(ctx.warmup_steps, static_cast<std::int64_t>(steps.size()))
       << " within the harness.warmup_steps = " << ctx.warmup_steps << " warm-up steps"
       << (skipped ? ", or skipped" : "") << ")\n";
  } else {
    // Steps are counted from 1 here, as in the progress lines (the results file's rows count from 0).
    os << measured.size() << " measured (steps " << measured.front()->step + 1 << ".." << measured.back()->step + 1
       << "), the first " << ctx.warmup_steps << " excluded as warm-up (harness.warmup_steps)";
    if (skipped) os << ", " << skipped << " skipped (non-finite loss)";
    os << "\n";
    auto col = [&](auto get) {
      std::vector<double> v;
      for (const StepRecord* s : measured) v.push_back(get(*s));
      return v;
    };
    os << "  step time      " << spread_line(col([](const StepRecord& s) { return s.step_time_s; }), "%.4g", " s")
       << "  (max over ranks)\n";
    if (ctx.world_size > 1) {
      const double spread = percentile(col([](const StepRecord& s) { return s.rank_spread; }), 50);
      os << "  across ranks   median (max - min) / median step time: " << fmt("%.1f", 100 * spread) << "%\n";
    }
    os << "  tokens/s       " << spread_line(col([](const StepRecord& s) { return s.tokens_per_s; }), "%.4g", "") << "\n";
    const double mfu = percentile(col([](const StepRecord& s) { return s.mfu; }), 50);
    os << "  MFU            median " << fmt("%.2f", 100 * mfu)
       << "% (causal-attention FLOPs: "
       << fmt("%.2f", 100 * percentile(col([](const StepRecord& s) { return s.mfu_causal; }), 50)) << "%) of "
       << ctx.peak_text
       << (ctx.active_only ? "; model FLOPs count the ACTIVE parameters only (each token's top-k experts)" : "")
       << "\n";
    if (mfu > 1)
      // No step can beat the peak: a measured one was taken while other work held the cores (a start-up sgemm of a
      // fraction of a second), a declared one is wrong. Said here so that the figure is not read as a result.
      os << "  note           MFU above 100%: the peak is below the rate this run's own steps reached (measured: the "
            "machine was busy while it was measured at start-up). Fix: rerun on an idle machine, or set "
            "device.peak_tflops to the machine's rate, so that runs compare\n";
    // Closure as shares of the summed step time of the measured steps (mean over ranks).
    std::array<double, kNumRankFields> sum{};
    for (const StepRecord* s : measured)
      for (int f = 0; f < kNumRankFields; ++f) sum[f] += s->mean[f];
    const double total = sum[static_cast<int>(RankField::step_time_s)];
    auto share = [&](RankField f) { return fmt("%.1f", total > 0 ? 100 * sum[static_cast<int>(f)] / total : 0.0) + "%"; };
    os << "  step closure   compute " << share(RankField::compute_s) << " (forward " << share(RankField::forward_s)
       << ", backward " << share(RankField::backward_s) << ", recompute " << share(RankField::recompute_s)
       << "), exposed comm " << share(RankField::exposed_comm_s) << " (join " << share(RankField::join_wait_s)
       << ", transfer " << share(RankField::transfer_wait_s) << "), pipeline " << share(RankField::pipeline_wait_s)
       << ", optimizer " << share(RankField::optimizer_s) << ", other " << share(RankField::other_s) << "\n";
    os << "  CPU time       " << share(RankField::cpu_time_s) << " of wall time on the compute thread\n";
    double peak = 0, reserved = 0;
    for (const StepRecord* s : measured) {
      peak = std::max(peak, s->mem_peak_max);
      reserved = std::max(reserved, s->mean[static_cast<int>(RankField::mem_reserved_bytes)]);
    }
    os << "  memory         peak allocated " << human_bytes(peak) << " (max over ranks), reserved " << human_bytes(reserved)
       << " (mean over ranks); model state on rank " << std::max(ctx.phantom_rank, 0) << ": param " << human_bytes(static_cast<double>(ctx.model_state[0]))
       << ", grad " << human_bytes(static_cast<double>(ctx.model_state[1])) << ", master "
       << human_bytes(static_cast<double>(ctx.model_state[2])) << ", m " << human_bytes(static_cast<double>(ctx.model_state[3]))
       << ", v " << human_bytes(static_cast<double>(ctx.model_state[4])) << "\n";
  }
  if (!steps.empty()) {
    os << "  loss           first " << fmt("%.5g", steps.front().loss) << ", last " << fmt("%.5g", steps.back().loss);
    if (ctx.phantom_rank >= 0)
      os << " (phantom: rank " << ctx.phantom_rank << " of " << ctx.world_size
         << " on stand-in data, not comparable with a real run)";
    if (!std::isfinite(steps.back().loss)) {
      for (auto it = steps.rbegin(); it != steps.rend(); ++it)
        if (std::isfinite(it->loss)) {
          os << " (last finite " << fmt("%.5g", it->loss) << " at step " << it->step << ")";
          break;
        }
    } else if (ctx.loss_floor > 0) {
      os << " (data floor " << fmt("%.5g", ctx.loss_floor) << " nats/token: last is "
         << fmt("%.2f", 100 * (steps.back().loss / ctx.loss_floor - 1)) << "% above)";
    }
    os << "\n";
  }
  os << "  stability      " << loss_spikes << " loss spikes, " << grad_spikes << " gradient-norm spikes (z > "
     << fmt("%.3g", ctx.spike_threshold) << " over the previous " << ctx.spike_window << " steps), " << skipped
     << " skipped steps\n";
  return os.str();
}

}  // namespace hzp::harness
