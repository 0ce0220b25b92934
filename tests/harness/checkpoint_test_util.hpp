// The in-process tests' checkpoint round trip (checkpoint_io.hpp): a scheduler's state saved after a step, and a
// freshly built scheduler restored from the file, as `hzpbench run` and `--resume` do it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "hzp/harness/checkpoint_io.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::test {

/// Collective over `comm`: `scheduler`'s state after step `step` (0-based) of a run of `model` under `train`.
inline void save_checkpoint(MPI_Comm comm, const std::filesystem::path& path, schedulers::Scheduler& scheduler,
                            const workloads::Workload& model, const workloads::TrainConfig& train, std::int64_t step) {
  harness::CheckpointMeta m;
  m.step = step;
  m.precision = std::string(workloads::to_string(train.precision));
  m.scheduler = std::string(scheduler.name());
  harness::write_checkpoint(comm, path, scheduler, model.layout(), model.describe(), m);
}

/// Collective over `comm`: restores `scheduler` (just built) from `path`; returns the step it continues at.
inline std::int64_t resume_checkpoint(MPI_Comm comm, const std::filesystem::path& path, schedulers::Scheduler& scheduler,
                                      const workloads::Workload& model, const workloads::TrainConfig& train) {
  harness::ResumeSource src(comm, path, model.layout(), model.describe(), std::string(workloads::to_string(train.precision)));
  src.restore(scheduler);
  return src.meta().step + 1;
}

}  // namespace hzp::test
