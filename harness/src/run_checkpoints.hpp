// The run's checkpoints (docs/checkpoints.md): when they are due (every output.checkpoint_every steps, and after
// the step at which the ranks agreed to stop on a caught signal), where they go (output.checkpoint_dir, default
// beside the results file), and which are kept (output.checkpoint_keep: rank 0 removes this run's older ones once
// a newer one is complete, never one it did not write). Also the check that refuses a run without training state to
// checkpoint (debug.collective_only), before anything runs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <string_view>

#include "hzp/harness/checkpoint_io.hpp"
#include "run_setup.hpp"

namespace hzp::harness {

/// ConfigError naming `why` (the key or --resume that asks for checkpoints) and the fix when the run has no training
/// state to write or read (debug.collective_only's stand-in scheduler).
void check_checkpoint_support(const RunSetup& setup, std::string_view why);
/// Why the run's layout cannot be checkpointed, with the fix ("" when it can): check_checkpoint_support's reason.
std::string checkpoint_unsupported(const RunSetup& setup);

class RunCheckpoints {
 public:
  /// `results`: the results file (names the checkpoints and is their default folder).
  RunCheckpoints(const RunOptions& options, const std::filesystem::path& results, bool root);

  /// Checkpoints are written at all (periodically, or only after a caught signal: output.checkpoint_on_signal).
  bool enabled() const noexcept { return on_; }
  /// A periodic checkpoint is due after step `step` (0-based).
  bool due(std::int64_t step) const noexcept { return every_ > 0 && (step + 1) % every_ == 0; }
  /// Collective over `comm`: writes the checkpoint after step meta.step, then (rank 0) removes this run's older
  /// ones beyond output.checkpoint_keep. Returns its path.
  std::filesystem::path write(MPI_Comm comm, schedulers::Scheduler& scheduler, const workloads::ParamLayout& layout,
                              const std::string& model, const CheckpointMeta& meta);
  /// The last checkpoint written (empty before the first).
  const std::filesystem::path& last() const noexcept { return last_; }

 private:
  std::int64_t every_, keep_;
  bool on_;
  std::filesystem::path dir_, results_, last_;
  bool root_;
  std::deque<std::filesystem::path> written_;
};

}  // namespace hzp::harness
