// Clocks: monotonic wall time and per-thread CPU time. On an oversubscribed machine (more ranks than
// cores) wall time includes time spent descheduled; thread CPU time tells compute from waiting.
#pragma once

namespace hzp {

/// Seconds on the monotonic clock (steady_clock), comparable across threads of one process.
double wall_seconds() noexcept;
/// CPU seconds consumed by the calling thread (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds() noexcept;
/// CPU seconds consumed by the whole process, all threads.
double process_cpu_seconds() noexcept;
/// Seconds since the Unix epoch (for timestamps written to results files).
double unix_seconds() noexcept;

/// Measures wall and thread-CPU time of a region on one thread.
class Stopwatch {
 public:
  Stopwatch() noexcept { restart(); }
  void restart() noexcept {
    wall0_ = wall_seconds();
    cpu0_ = thread_cpu_seconds();
  }
  double wall() const noexcept { return wall_seconds() - wall0_; }
  double cpu() const noexcept { return thread_cpu_seconds() - cpu0_; }

 private:
  double wall0_ = 0.0;
  double cpu0_ = 0.0;
};

}  // namespace hzp
