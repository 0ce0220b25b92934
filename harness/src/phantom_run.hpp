// Phantom peers in `hzpbench run` (docs/phantom.md): topology.phantom_world = W runs one process as rank
// topology.phantom_rank of a W-rank job. Here: reading and checking the two keys against the MPI job, and refusing
// the layouts phase 1 does not cover, each with the key, its value and the fix.
#pragma once

#include "run_setup.hpp"

namespace hzp::harness {

struct PhantomSpec {
  int world = 0;  ///< W; 0 = a real run
  int rank = 0;   ///< the rank this process plays
  bool on() const noexcept { return world > 0; }
};

/// The keys, checked: phantom_world = W needs one MPI process and topology.world_size 0 or W, phantom_rank in
/// 0..W-1 (and 0 without phantom_world). ConfigError naming the key, its value and the fix otherwise.
PhantomSpec phantom_spec(const ResolvedConfig& config, int mpi_world);

/// Refuses what a phantom run cannot do (checkpoints, resume: it holds one rank's state and starts from
/// initialisation); turns output.checkpoint_on_signal off with a note. No-op for a real run.
void apply_phantom(RunSetup& setup, const PhantomSpec& phantom, bool resuming);

}  // namespace hzp::harness
