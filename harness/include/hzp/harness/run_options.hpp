// The keys of `hzpbench run` itself (scheduler.name, backend, links.profile, device.*, output.*,
// harness.* and the hidden debug.* fault-injection keys), registered into the one option table by
// option_keys.cpp, and read back as one typed struct. Also the embedded default configuration (what
// `hzpbench run` uses without --config) and the one place that picks the default scheduler by world size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hzp/core/options.hpp"

namespace hzp::harness {

/// Adds the run's keys (one block of the table; see option_keys.cpp).
void register_run_keys(OptionTable& table);

/// A fault to inject at one rank and step (`debug.throw_at`, `debug.stall_at` = "rank:step").
struct FaultSpec {
  int rank = -1;
  std::int64_t step = -1;
  bool active() const noexcept { return rank >= 0; }
  bool hits(int r, std::int64_t s) const noexcept { return rank == r && step == s; }
};

/// Parses "rank:step" (both non-negative integers) or "" (inactive). ConfigError naming `key`, the
/// text and the expected form.
FaultSpec parse_fault_spec(const std::string& key, const std::string& text);

/// The run's own keys, typed.
struct RunOptions {
  std::string scheduler;          ///< scheduler.name
  std::string backend;            ///< backend: "cpu", or "cuda" (scheduler none on one GPU, docs/cuda.md)
  std::string links_profile;      ///< links.profile: none | h100-dgx | paper-npu | custom
  double comm_to_compute = 0;     ///< links.comm_to_compute (0 = off)
  double custom_intra_flop_per_byte = 0;  ///< links.custom.intra_flop_per_byte
  double custom_inter_flop_per_byte = 0;  ///< links.custom.inter_flop_per_byte
  double peak_tflops = 0;         ///< device.peak_tflops (0 = device table / measured GEMM peak)
  std::string sim_calibration = "measure";  ///< simulate.calibration: measure | profile
  double sim_mfu = 0.5;                     ///< simulate.mfu
  bool sim_fold = true;                     ///< simulate.fold: one simulation per role
  std::string output_path;        ///< output.path ("" = results/<UTC time>-<config hash>.h5)
  double flush_s = 5;             ///< output.flush_s (0 = after every step)
  bool trace = false;             ///< output.trace
  bool force = false;             ///< output.force (or --force)
  std::int64_t checkpoint_every = 0;  ///< output.checkpoint_every (0 = off)
  std::string checkpoint_dir;         ///< output.checkpoint_dir ("" = beside the results file)
  std::int64_t checkpoint_keep = 2;   ///< output.checkpoint_keep (0 = every one kept)
  bool checkpoint_on_signal = false;  ///< output.checkpoint_on_signal
  /// A caught signal stops the run with a checkpoint (periodic checkpoints, or on a signal only).
  bool checkpoints_on() const noexcept { return checkpoint_every > 0 || checkpoint_on_signal; }
  double watchdog_s = 0;          ///< harness.watchdog_s (0 = off)
  std::int64_t warmup_steps = 0;  ///< harness.warmup_steps
  std::int64_t skip_nonfinite = 0;  ///< harness.skip_nonfinite
  std::int64_t spike_window = 20;   ///< harness.spike_window
  double spike_threshold = 4;       ///< harness.spike_threshold
  bool intra_op_pool = true;        ///< harness.cpu_threads = pool (false: openblas)
  FaultSpec throw_at;             ///< debug.throw_at
  FaultSpec stall_at;             ///< debug.stall_at
  std::int64_t nan_at = -1;       ///< debug.nan_at (-1 = off)
  bool collective_only = false;   ///< debug.collective_only
};

/// Reads the keys above; ConfigError for a malformed debug spec.
RunOptions run_options_from(const ResolvedConfig& config);

/// The scheduler the embedded default runs at `world_size` ranks: `none` on one rank; at more ranks the
/// first registered of the ZeRO family (zero3, zero2, zero1, ddp), or nullopt while none of them is
/// registered (validation then says which schedulers exist). The one place this choice is made.
std::optional<std::string> default_scheduler(int world_size);

/// The embedded default configuration as TOML: model.preset (small, on the synthetic source), the
/// scheduler for `world_size` and the link keys, nothing else, so that `--set model.preset=tiny` still
/// gets all of tiny's own defaults.
std::string embedded_default_toml(int world_size);

/// A short, stable hash of a resolved configuration's values (origins ignored): 8 hex digits of
/// FNV-1a over ResolvedConfig::to_toml(false). Names default output files.
std::string config_hash(const ResolvedConfig& config);

/// `results/<UTC time>-<config hash>.h5` (UTC time as 20240501T123456Z) for a Unix time in seconds.
std::string default_output_path(const ResolvedConfig& config, double unix_seconds);
/// `dir/name-<n>.h5` for `dir/name.h5`: the next candidate when a default name is taken.
std::string numbered_path(const std::string& path, int n);

}  // namespace hzp::harness
