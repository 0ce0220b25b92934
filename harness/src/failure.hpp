// Clean failure for `hzpbench run` (docs/run.md "Failure"): exit codes, the exception that carries one to
// main, failure reports, and the control channel on which any rank tells rank 0 that it failed. Rank 0
// receives reports on its results thread (results_thread.hpp), which is never blocked in a collective, so
// it learns of a failure even while its main thread waits for the failed rank.
#pragma once

#include <mpi.h>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

namespace hzp::harness {

/// The exit codes of `hzpbench run` (and validate): documented in docs/run.md and `hzpbench run --help`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;  ///< configuration, data or output path: nothing ran (or set-up failed)
inline constexpr int kExitDiverged = 3;  ///< a NaN/inf loss stopped the run (status `diverged`)
inline constexpr int kExitFailed = 4;    ///< an error on some rank during the run (status `failed: ...`)
/// A caught SIGTERM/SIGINT/SIGUSR1 with checkpointing on: the ranks agreed on a step, wrote a checkpoint after it and
/// stopped (status `preempted: ...` naming it); `hzpbench run --resume` continues from it.
inline constexpr int kExitPreempted = 5;
// A caught termination signal ends the run with 128 + its number (signal_stop.hpp): 130 SIGINT, 138 SIGUSR1,
// 143 SIGTERM, status `failed: <rank>: terminated by SIG...`.

/// Ends `hzpbench run` with an exit code. main catches it, prints `message` when `print` is set (ranks
/// other than 0 stay quiet for errors every rank sees alike) and returns `code`.
class RunExit : public std::runtime_error {
 public:
  RunExit(int code, std::string message, bool print)
      : std::runtime_error(std::move(message)), code_(code), print_(print) {}
  int code() const noexcept { return code_; }
  bool print() const noexcept { return print_; }

 private:
  int code_;
  bool print_;
};

/// kExitBadInput for configuration and data errors, kExitFailed for anything else.
int exit_code_for(const std::exception& e) noexcept;
/// The message a failure status carries: hzp::Error::message() (without the source location), or what().
std::string failure_message(const std::exception& e);

/// One rank's failure, as rank 0 records it.
struct FailureReport {
  /// signal: the rank caught a termination signal (signal_stop.hpp); like an error, it explains itself.
  enum class Kind : int { error = 0, timeout = 1, watchdog = 2, signal = 3 };
  int rank = -1;
  int exit_code = kExitFailed;
  Kind kind = Kind::error;
  double last_progress_unix_s = 0;  ///< when the rank last made progress (watchdog precedence)
  std::string message;
  /// Watchdog reports: the rank was blocked in a communication wait, i.e. waiting for a peer.
  bool waiting_on_peers = false;

  static FailureReport from_exception(int rank, const std::exception& e, double last_progress_unix_s);
  /// Whether this report explains a failure better than `other`: an error or a signal beats a timeout or a
  /// watchdog (those are usually consequences of another rank's failure); between watchdogs, a rank
  /// that stopped outside any communication wait beats one waiting for its peers, then the rank that
  /// stopped first.
  bool better_than(const FailureReport& other) const noexcept;
};

/// A duplicate of the world communicator that carries failure reports to rank 0. Thread-safe: send()
/// from any thread of any rank; poll() from one thread of rank 0.
class ControlChannel {
 public:
  /// Collective over `world` (MPI_Comm_dup). Rank 0 posts its first receive at once.
  explicit ControlChannel(MPI_Comm world);
  /// Rank 0 cancels its pending receive; the duplicate is freed. Call only when no rank can still send
  /// (after the run's final barrier) or when the job is about to be aborted anyway.
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  /// Ranks other than 0: sends `report` to rank 0 and waits at most `timeout_s` for it to leave (MPI_Test
  /// + sleep). Only the first report of a rank is sent; later ones return false at once.
  bool send(const FailureReport& report, double timeout_s);
  /// Rank 0: a report that has arrived, if any (never blocks), and the next receive posted.
  std::optional<FailureReport> poll();

 private:
  struct Wire;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MPI_Request recv_ = MPI_REQUEST_NULL;
  std::unique_ptr<Wire> inbox_;
  std::mutex send_mu_;
  bool sent_ = false;
};

/// Ends the whole job now: flushes stdout/stderr and calls MPI_Abort(MPI_COMM_WORLD, code), which
/// mpiexec turns into its own exit code (checked: MPICH hydra returns `code`); a job of one rank ends with
/// _Exit(code) instead (no exit handlers racing a thread that still computes). Never returns.
[[noreturn]] void abort_job(int code) noexcept;

}  // namespace hzp::harness
