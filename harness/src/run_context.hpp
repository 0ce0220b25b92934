// The process-level context of `hzpbench run`: MPI (initialised once, MPI_THREAD_MULTIPLE), the topology,
// the `harness` communicator for the harness's own traffic (its own counters, outside every scheduler's),
// the control channel for failure reports, the thread settings (OpenBLAS set to one thread per rank when
// the ranks fill the cores), and the provenance the results file starts with.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "failure.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/harness/results_file.hpp"
#include "hzp/workloads/data_source.hpp"
#include "run_setup.hpp"

namespace hzp::harness {

/// MPI for the lifetime of the command: MPI_Init_thread(MULTIPLE) unless already initialised (then left
/// to its owner), MPI_Finalize at the end. Throws MpiError when MULTIPLE is not provided: the results
/// thread, the watchdog and the main thread all make MPI calls.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  bool owned_ = false;
  int rank_ = 0, size_ = 1;
};

/// Threads of one rank, as recorded (`threads.*` attributes).
struct ThreadSettings {
  int cores = 1;              ///< CPUs this process may run on (sched_getaffinity)
  int ranks_on_machine = 1;   ///< ranks sharing this machine (MPI shared-memory split)
  int openblas = 1;           ///< OpenBLAS threads after the harness's decision
  bool openblas_set = false;  ///< whether the harness set them (ranks >= cores, or train.deterministic)
};

struct RunContext {
  int rank = 0;
  int world_size = 1;
  coll::Topology topology;
  std::unique_ptr<coll::MpiCommunicator> harness;  ///< "harness": metrics gathers, agreement, the trace
  std::unique_ptr<ControlChannel> control;         ///< failure reports to rank 0
  ThreadSettings threads;

  /// Collective over MPI_COMM_WORLD. Sets OpenBLAS to one thread when the ranks on this machine are at
  /// least its cores (env-notes.md: ranks already fill them; more threads only oversubscribe), and always
  /// in deterministic mode (train.deterministic).
  static RunContext create(const RunSetup& setup, int ranks_per_node);
};

/// What the results file records from the start (RunInfo of results_file.hpp).
RunInfo make_run_info(const std::vector<std::string>& argv, const ResolvedConfig& config, const RunSetup& setup,
                      const RunContext& ctx, const workloads::DataSource& source);

/// Broadcasts `text` from rank 0 of `comm` to every rank (collective).
std::string broadcast_string(coll::Communicator& comm, std::string text);
/// Sum / max over ranks of `value` on `comm` (collective).
double all_reduce_sum(coll::Communicator& comm, double value);
double all_reduce_max(coll::Communicator& comm, double value);

}  // namespace hzp::harness
