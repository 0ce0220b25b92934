// The watchdog of `hzpbench run`: the run loop beats a heartbeat at every stage of a step; a thread
// checks it, and when a rank has made no progress for `harness.watchdog_s` it reports the stall (with
// the rank's last collectives, from its counters) so that the job ends instead of hanging.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>

namespace hzp::coll {
class CommCounters;
}

namespace hzp::harness {

/// Where the compute thread is and when it last moved on. Written by one thread, read by any.
class Progress {
 public:
  Progress() noexcept { beat(-1, "starting"); }
  /// `where` must be a string literal (it is kept as a pointer).
  void beat(std::int64_t step, const char* where) noexcept;
  double seconds_since() const noexcept;
  double last_unix_s() const noexcept { return last_unix_.load(std::memory_order_relaxed); }
  std::int64_t step() const noexcept { return step_.load(std::memory_order_relaxed); }
  const char* where() const noexcept { return where_.load(std::memory_order_relaxed); }
  /// Raised by the collectives while the compute thread waits for a request (coll::observe_comm_waits):
  /// a rank idle inside such a wait is waiting for a peer, not stalled on its own.
  std::atomic<int>* comm_wait_counter() noexcept { return &comm_waits_; }
  bool in_comm_wait() const noexcept { return comm_waits_.load(std::memory_order_relaxed) > 0; }

 private:
  std::atomic<double> last_wall_{0};
  std::atomic<double> last_unix_{0};
  std::atomic<std::int64_t> step_{-1};
  std::atomic<const char*> where_{"starting"};
  std::atomic<int> comm_waits_{0};
};

/// Checks a Progress from its own thread. When the heartbeat is older than `limit_s`, calls
/// `on_stall(seconds since the last beat)` once, on the watchdog thread, and stops checking; on_stall is
/// expected to end the job (report the failure, then abort). limit_s <= 0 starts no thread.
class Watchdog {
 public:
  Watchdog(double limit_s, const Progress& progress, std::function<void(double)> on_stall);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  /// Stops and joins the thread (idempotent). Not to be called from on_stall.
  void stop();

 private:
  void loop();
  double limit_s_;
  const Progress& progress_;
  std::function<void(double)> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// The last `n` collectives recorded by `counters` (one line each: group, op, elements, dtype, thread,
/// start relative to now, whether it completed), newest last; "none recorded" when empty.
std::string last_collectives_text(std::span<coll::CommCounters* const> counters, int n);

}  // namespace hzp::harness
