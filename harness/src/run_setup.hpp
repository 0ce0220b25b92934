// Everything about a run that is decided from its configuration and world size alone, before MPI work
// and before any compute: the resolved configuration (embedded default or --config, then --set), the
// typed model/train/data/run configs, and every check a bad input can fail. `hzpbench run` and
// `hzpbench validate` share it, so both give the same messages.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/core/options.hpp"
#include "hzp/harness/link_profiles.hpp"
#include "hzp/harness/run_options.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/data/data_config.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/train_config.hpp"

namespace hzp::harness {

/// The command-line inputs of a run besides --config/--set.
struct RunCliArgs {
  ConfigArgs config;
  std::string out;           ///< --out PATH ("" = output.path)
  bool force = false;        ///< --force
  std::string dump_tensors;  ///< --dump-tensors STEPS ("0,5,9"; "" = none)
  std::string resume;        ///< --resume CKPT ("" = start at step 0)
};

/// Layers: key defaults < presets < (the embedded default for `world_size`, or --config FILE) < --set <
/// --out / --force. ConfigError naming key, value, origin and fix. Then fit_warmup_to_steps.
ResolvedConfig resolve_run_config(const RunCliArgs& args, int world_size);
/// A train.warmup_steps that came from a default or preset and exceeds train.steps is scaled to the
/// preset's share of the run (its origin says so); an explicit one is left to be checked as given.
void fit_warmup_to_steps(ResolvedConfig& cfg);

struct RunSetup {
  RunOptions opt;
  /// The model the workload factory builds from model.* (described, not yet allocated).
  std::shared_ptr<const workloads::ModelSpec> model;
  workloads::TrainConfig train;
  workloads::DataConfig data;
  coll::MpiCommConfig comm;       ///< collectives.* and links.* as configured (profiles applied later)
  schedulers::SchedulerOptions sched;  ///< scheduler.* (bucket_mb, overlap, group_size)
  /// The scheduler's plan for rank 0 (memory per component, collectives per step), made without MPI;
  /// absent for debug.collective_only. Making it runs the scheduler's own configuration checks.
  std::optional<schedulers::SchedulerPlan> plan;
  int world_size = 1;
  /// The parallel degrees the scheduler runs with (recorded in the results file as parallel.*).
  schedulers::ParallelDims dims;
  std::int64_t dp = 1;            ///< data-parallel ranks the batch is split over
  bool uses_world_comm = false;   ///< the scheduler takes a world communicator (none does not)
  std::vector<std::int64_t> dump_steps;  ///< --dump-tensors, sorted
  std::vector<std::string> notes; ///< non-fatal remarks (validate prints them; run prints them on rank 0)
};

/// Checks the configuration for `world_size` ranks and returns the typed setup; ConfigError with the
/// first problem found (each typed config lists all of its own problems at once).
RunSetup plan_run(const ResolvedConfig& config, int world_size, const std::string& dump_tensors = {});

/// links.* as the link plan's inputs, before any rate is measured: where run and simulate both start.
LinkPlanInput link_plan_input(const RunSetup& setup);

/// collectives.* and links.* as the MPI backend's settings.
coll::MpiCommConfig mpi_comm_config_from(const ResolvedConfig& config);

/// "0,5,9" -> {0, 5, 9}; ConfigError naming --dump-tensors for anything else or a step >= steps.
std::vector<std::int64_t> parse_dump_steps(const std::string& text, std::int64_t steps);

/// Refuses an output path that would fail later: an existing file without force, a directory, or a
/// parent that cannot be created or written. ConfigError naming output.path and the fix.
void check_output_path(const std::string& path, bool force);

}  // namespace hzp::harness
