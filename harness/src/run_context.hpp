// The process-level context of `hzpbench run`: MPI (initialised once, MPI_THREAD_MULTIPLE), the topology,
// the `harness` communicator for the harness's own traffic (its own counters, outside every scheduler's),
// the control channel for failure reports, the thread settings (OpenBLAS given each rank's share of the
// CPUs), and the provenance the results file starts with.
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
  int machine_rank = 0;       ///< this rank's index among them (backend = cuda: its GPU)
  int openblas = 1;           ///< OpenBLAS threads after the harness's decision (1 when the pool has them)
  int intra_op = 1;           ///< threads of the intra-op pool (harness.cpu_threads = pool), the caller included
  bool openblas_set = false;  ///< whether the harness set them (see openblas_threads_for)
};

/// OpenBLAS threads for one rank, or 0 to leave OpenBLAS's own setting: 1 in deterministic mode (a threaded
/// GEMM may split its sums differently with the thread count); 0 when the environment already says
/// (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, as the Slurm sweeps set them); otherwise the rank's share of
/// the CPUs: its affinity mask when the launcher bound it to fewer than the machine's online CPUs, else the
/// online CPUs over the ranks on the machine, at least 1. OpenBLAS's default is every online CPU in every
/// process: 8 ranks on a 64-core node would start 512 threads.
int openblas_threads_for(int affinity_cpus, int online_cpus, int ranks_on_machine, bool deterministic, bool env_set);
/// CPUs this process may run on (its affinity mask).
int affinity_cpus();
/// Sets a rank's compute threads for this machine and `ranks_on_machine` ranks: OpenBLAS's by openblas_threads_for,
/// then handed to the intra-op pool (harness.cpu_threads = pool). Whether OpenBLAS's count was set.
bool set_compute_threads(const RunSetup& setup, int ranks_on_machine);

struct RunContext {
  int rank = 0;        ///< the run's rank (a phantom run's: topology.phantom_rank)
  int world_size = 1;  ///< the run's world (a phantom run's: topology.phantom_world)
  coll::Topology topology;
  std::unique_ptr<coll::MpiCommunicator> harness;  ///< "harness": metrics gathers, agreement, the trace
  std::unique_ptr<ControlChannel> control;         ///< failure reports to rank 0
  ThreadSettings threads;
  int process_rank = 0;  ///< this process's MPI rank: 0 writes the results file
  bool phantom = false;  ///< a phantom run (docs/phantom.md): harness and world are phantom communicators

  /// Collective over MPI_COMM_WORLD. Sets OpenBLAS's threads by openblas_threads_for (docs/environment.md:
  /// with the ranks filling the cores, more threads only oversubscribe). A phantom run (phantom_world > 0, one
  /// process) plays rank phantom_rank of phantom_world on virtual nodes of ranks_per_node (0: all on one node).
  static RunContext create(const RunSetup& setup, int ranks_per_node, int phantom_world = 0, int phantom_rank = 0);
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
