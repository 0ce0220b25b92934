// The progress line (progress.hpp).
#include "progress.hpp"

#include <cstdio>

namespace hzp::harness {

std::string format_progress(const StepRecord& r, std::int64_t total_steps) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %5lld/%lld  loss %.5f  tok/s %.4g  MFU %.2f%%  comm %.1f%%  mem %s  %.4g ms",
                static_cast<long long>(r.step + 1), static_cast<long long>(total_steps), r.loss, r.tokens_per_s,
                100 * r.mfu, 100 * r.exposed_comm_frac, human_bytes(r.mem_peak_max).c_str(), 1e3 * r.step_time_s);
  std::string line = buf;
  if (r.skipped) line += "  skipped (non-finite loss)";
  if (r.loss_spike) line += "  loss spike";
  if (r.grad_norm_spike) line += "  grad-norm spike";
  return line;
}

}  // namespace hzp::harness
