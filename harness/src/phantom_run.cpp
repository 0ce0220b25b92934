// topology.phantom_world / phantom_rank: checked against the MPI job, and what a phantom run cannot do (checkpoints,
// --resume) refused (docs/phantom.md).
#include "phantom_run.hpp"

#include "hzp/core/error.hpp"

namespace hzp::harness {

PhantomSpec phantom_spec(const ResolvedConfig& cfg, int mpi_world) {
  const std::int64_t w = cfg.get_int32("topology.phantom_world"), r = cfg.get_int("topology.phantom_rank");
  if (w == 0) {
    if (r != 0)
      HZP_THROW(ConfigError, "topology.phantom_rank = ", r, " with topology.phantom_world = 0 (a real run, whose ranks "
                "come from mpiexec). Fix: set topology.phantom_world to the world this rank belongs to, or leave "
                "topology.phantom_rank at 0");
    return {};
  }
  if (mpi_world != 1)
    HZP_THROW(ConfigError, "topology.phantom_world = ", w, " runs one process as one rank of ", w, ", but mpiexec "
              "started ", mpi_world, " processes. Fix: run hzpbench as one process (no mpiexec, or mpiexec -n 1), or "
              "topology.phantom_world = 0 for a real ", mpi_world, "-rank run");
  const std::int64_t ws = cfg.get_int("topology.world_size");
  if (ws != 0 && ws != w)
    HZP_THROW(ConfigError, "topology.phantom_world = ", w, " but topology.world_size = ", ws, ": a phantom run's world "
              "is phantom_world. Fix: topology.world_size = ", w, " or 0");
  if (const std::int64_t k = cfg.get_int("topology.ranks_per_node"); k > 0 && w % k != 0)
    HZP_THROW(ConfigError, "topology.ranks_per_node = ", k, " does not divide topology.phantom_world = ", w, " (", w,
              " = ", k, " x ", w / k, " + ", w % k, "). Fix: a divisor of ", w, ", or 0 (all ", w, " ranks on one node)");
  if (r >= w)
    HZP_THROW(ConfigError, "topology.phantom_rank = ", r, " is outside the phantom world's ranks 0..", w - 1,
              " (topology.phantom_world = ", w, "). Fix: a rank in 0..", w - 1);
  return {static_cast<int>(w), static_cast<int>(r)};
}

void apply_phantom(RunSetup& s, const PhantomSpec& p, bool resuming) {
  if (!p.on()) return;
  const std::string what = "topology.phantom_world = " + std::to_string(p.world);
  // backend = cuda runs too (docs/phantom.md, "On the GPU"): the world is the phantom one, its device calls enqueued
  // on the engines' streams. What the GPU does not run at all (MoE) run_setup refuses for every run.
  if (s.opt.checkpoint_every > 0)
    HZP_THROW(ConfigError, what, " with output.checkpoint_every = ", s.opt.checkpoint_every, ": a phantom run holds "
              "one rank's shards, not a checkpoint's. Fix: output.checkpoint_every = 0");
  if (resuming)
    HZP_THROW(ConfigError, what, " with --resume: a phantom run starts from initialisation. Fix: drop --resume");
  if (s.opt.checkpoint_on_signal) {
    s.opt.checkpoint_on_signal = false;
    s.notes.push_back(what + ": output.checkpoint_on_signal is off (a phantom run holds one rank's shards only)");
  }
  s.notes.push_back(what + ": this process runs rank " + std::to_string(p.rank) + " alone; the other ranks' data is a "
                    "stand-in, so the loss is not comparable with a real run (docs/phantom.md)");
}

}  // namespace hzp::harness
