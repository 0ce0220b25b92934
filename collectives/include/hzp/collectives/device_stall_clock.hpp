// The compute stream's stalls on communication, timed on the device (docs/cuda.md "Timing"): a timed event is
// recorded on the stream right before and right after each point where the stream is made to wait for a
// collective, and the device time between the two is the stall. The events are read once per step, after the
// step's own synchronisation, so timing adds no host wait.
//
// Why a thread-local observation rather than a parameter: the NCCL communicator makes its caller's stream wait
// for a collective's end where the collective is issued, and every engine issues through the one Communicator
// interface. The step driver observes its compute stream on its thread for the length of a step, so each engine's
// waits are timed without per-engine code; a background thread's collectives (asynchzp's lanes) are issued on
// other streams by other threads and are not counted, which is what "exposed" means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "hzp/core/stream.hpp"

namespace hzp::coll {

/// Where the stream waits: where the collective is issued (NCCL orders the caller's stream after it), or where
/// its result is used (asynchzp async: the compute stream waits on a lane's event right before the consumer).
enum class StallKind : std::uint8_t { at_issue, at_use };

/// One settled stall: device seconds between the stream reaching the wait and passing it.
struct Stall {
  double seconds = 0;
  StallKind kind = StallKind::at_issue;
};

class DeviceStallClock {
 public:
  explicit DeviceStallClock(StreamRef stream) : stream_(stream) {}
  StreamRef stream() const noexcept { return stream_; }

  /// Runs `enqueue_wait` (which makes stream() wait) between two timed events. A call inside another is not
  /// recorded: the outer interval already holds it, and counting both would count the stall twice.
  template <typename F>
  void around(F&& enqueue_wait, StallKind kind) {
    if (depth_ > 0) {
      std::forward<F>(enqueue_wait)();
      return;
    }
    Mark& m = next_mark(kind);
    m.before.record(stream_);
    ++depth_;
    try {
      std::forward<F>(enqueue_wait)();
    } catch (...) {
      // The wait failed: give the mark back, or settle() would read its `after`, never recorded this step (an error
      // on a new mark, an earlier step's stale interval on a reused one).
      --depth_;
      --used_;
      throw;
    }
    --depth_;
    m.after.record(stream_);
  }

  /// Stalls recorded since the last settle(): the position of the next one, which the step driver keeps at its
  /// phase boundaries to tell which phase each stall fell in.
  std::size_t recorded() const noexcept { return used_; }

  /// The stalls recorded since the last settle(), in order; the stream must have passed them. The events are
  /// kept for the next step (no event is created per collective once the step's count is reached).
  std::vector<Stall> settle();

 private:
  struct Mark {
    TimedEvent before, after;
    StallKind kind = StallKind::at_issue;
  };
  Mark& next_mark(StallKind kind);

  StreamRef stream_;
  std::vector<Mark> marks_;  // marks_[0, used_) recorded this step
  std::size_t used_ = 0;
  int depth_ = 0;
};

/// From now on the calling thread's waits of `clock->stream()` on communication are timed by `clock`
/// (time_device_wait); nullptr stops it. One clock per thread; it must outlive the observation.
void observe_device_waits(DeviceStallClock* clock) noexcept;
/// The calling thread's observed clock, or nullptr.
DeviceStallClock* observed_device_waits() noexcept;

/// Observes `clock` on the calling thread for the scope's life, then restores what was observed before.
class DeviceWaitScope {
 public:
  explicit DeviceWaitScope(DeviceStallClock* clock) noexcept : previous_(observed_device_waits()) {
    observe_device_waits(clock);
  }
  ~DeviceWaitScope() { observe_device_waits(previous_); }
  DeviceWaitScope(const DeviceWaitScope&) = delete;
  DeviceWaitScope& operator=(const DeviceWaitScope&) = delete;

 private:
  DeviceStallClock* previous_;
};

/// Runs `enqueue_wait`, which makes `s` wait for communication: timed by the calling thread's observed clock when
/// that clock times `s`, else just run (another stream, another thread, or nothing observed).
template <typename F>
void time_device_wait(StreamRef s, StallKind kind, F&& enqueue_wait) {
  DeviceStallClock* clock = observed_device_waits();
  if (clock != nullptr && clock->stream() == s)
    clock->around(std::forward<F>(enqueue_wait), kind);
  else
    std::forward<F>(enqueue_wait)();
}

}  // namespace hzp::coll
