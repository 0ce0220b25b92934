// `hzpbench run`: configuration, set-up, the training loop (scheduler.step, metrics gathered to rank 0 on
// the harness communicator, rows handed to the results thread), fault injection, divergence, the summary,
// and the failure protocol. docs/run.md describes the flow; cmd_run.cpp only parses the command line.
#pragma once

#include <string>
#include <vector>

#include "run_setup.hpp"

namespace hzp::harness {

/// Runs the whole command. Returns kExitOk or kExitDiverged; throws RunExit for bad input (kExitBadInput,
/// before anything ran) and for a failure at one rank (kExitFailed after the file was marked). With more
/// than one rank a failure ends the job through MPI_Abort instead of returning.
int run_main(const RunCliArgs& args, const std::vector<std::string>& argv);

}  // namespace hzp::harness
