// A scheduler's training state to and from one checkpoint file (docs/checkpoints.md): the StateArchive a scheduler
// fills (schedulers/state_archive.hpp) implemented over CheckpointWriter and CheckpointReader, the tensor table of
// a model, and the scalars a run stores beside the arrays (the step, provenance) with the checks a resume makes
// against them. Used by `hzpbench run` (output.checkpoint_every, --resume) and by the resume tests in-process.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hzp/harness/checkpoint_file.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::harness {

/// Every tensor of `layout` (an unsharded model's) by name and global shape, in the flat order.
std::vector<CheckpointTensor> checkpoint_tensor_table(const workloads::ParamLayout& layout);

/// The scalars stored as root attributes: what the run continues from, and where the checkpoint came from.
struct CheckpointMeta {
  std::int64_t step = -1;       ///< attribute `step`: the last completed step (0-based); the resume runs step + 1 on
  std::int64_t seed = 0;        ///< `seed` (train.seed)
  std::string precision;        ///< `precision` (train.precision)
  std::string scheduler;        ///< `scheduler` (provenance)
  std::int64_t world_size = 1;  ///< `world_size` (provenance)
  std::int64_t global_batch = 0;  ///< `train.global_batch` (provenance: the data position is a function of it)
  std::string results_file;     ///< `results_file`: the results file of the run that wrote it
};

/// Collective over `comm` (every rank of the run): writes `scheduler`'s state after step `meta.step` to `path`
/// (under `path`.partial, renamed once whole), with the tensor table of `layout` and `model` (ModelSpec::describe()).
void write_checkpoint(MPI_Comm comm, const std::filesystem::path& path, schedulers::Scheduler& scheduler,
                      const workloads::ParamLayout& layout, const std::string& model, const CheckpointMeta& meta);

/// An opened, checked checkpoint to resume from: the reader has already checked the format, the model, the tensor
/// table and every checksum (DataError naming the file otherwise).
class ResumeSource {
 public:
  /// Collective over `comm`. DataError naming the file when it is missing, corrupt or of another model; ConfigError
  /// naming train.precision when the checkpoint's precision differs from `precision`.
  ResumeSource(MPI_Comm comm, const std::filesystem::path& path, const workloads::ParamLayout& layout,
               const std::string& model, const std::string& precision);
  const CheckpointMeta& meta() const noexcept { return meta_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  /// Collective: restores `scheduler` (right after its construction) so that its next step is meta().step + 1,
  /// then closes the file.
  void restore(schedulers::Scheduler& scheduler);

 private:
  std::filesystem::path path_;
  std::unique_ptr<CheckpointReader> reader_;
  CheckpointMeta meta_;
};

/// `<dir>/<stem of results>.step<N>.ckpt.h5` with N the completed step counted from 1 (as the progress lines do).
std::filesystem::path checkpoint_path_for(const std::filesystem::path& dir, const std::filesystem::path& results,
                                          std::int64_t step);

}  // namespace hzp::harness
