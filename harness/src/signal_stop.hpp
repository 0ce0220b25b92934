// Termination signals for `hzpbench run` (docs/run.md "Signals"): SIGTERM (Slurm at a time limit or a
// preemption, 30 s before SIGKILL; mpiexec passing on a kill), SIGINT (Ctrl-C) and SIGUSR1 (Slurm's
// `--signal`). The handler only records the signal; a thread of its own turns it into a failure report,
// so the run ends through the failure protocol: rank 0 writes every row it holds, sets the status to
// `failed: <rank>: terminated by SIG...` and closes the file, then the job ends with exit code 128 + the
// signal's number. A second signal ends the process at once (the default action).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace hzp::harness {

/// 128 + signo, the shell's convention: 130 for SIGINT, 138 for SIGUSR1, 143 for SIGTERM.
int exit_code_for_signal(int signo) noexcept;
/// "SIGTERM", "SIGINT", "SIGUSR1" (or "signal <n>").
std::string signal_name(int signo);

/// Catches SIGTERM, SIGINT and SIGUSR1 for its lifetime (one per process). When the first arrives,
/// calls `on_signal(signo)` once on its own thread; on_signal is expected to end the job. The previous
/// handlers come back on destruction.
class SignalStop {
 public:
  explicit SignalStop(std::function<void(int)> on_signal);
  ~SignalStop();
  SignalStop(const SignalStop&) = delete;
  SignalStop& operator=(const SignalStop&) = delete;

 private:
  void loop();
  std::function<void(int)> on_signal_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hzp::harness
