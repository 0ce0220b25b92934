// Streams and events: move-only owners (Stream, Event, TimedEvent) and trivially copyable
// non-owning refs (StreamRef, EventRef) used in every signature (docs/architecture.md, Conventions).
// CPU semantics: work "on" a CPU stream runs synchronously on the calling thread, so a CPU stream is
// always idle, recording an event marks it complete at once, and waiting is a no-op. TimedEvent on the
// CPU records a host timestamp. The CUDA implementations (docs/cuda.md) keep this interface.
#pragma once

#include <cstddef>

#include "hzp/core/device.hpp"

namespace hzp {

class StreamRef {
 public:
  StreamRef(int) = delete;             // no accidental "stream 0"
  StreamRef(std::nullptr_t) = delete;  // no accidental legacy default stream
  /// The host stream: synchronous CPU execution on the calling thread.
  static constexpr StreamRef host() noexcept { return StreamRef(Device::cpu(), nullptr); }
  /// Wraps a native handle (cudaStream_t for CUDA devices) without owning it.
  static constexpr StreamRef wrap(Device d, void* native) noexcept { return StreamRef(d, native); }

  Device device() const noexcept { return device_; }
  void* native() const noexcept { return native_; }
  /// Blocks the host until all work enqueued so far has finished (no-op on the CPU).
  void synchronize() const;
  /// True when all enqueued work has finished (always true on the CPU).
  bool query() const;
  friend bool operator==(StreamRef a, StreamRef b) noexcept {
    return a.device_ == b.device_ && a.native_ == b.native_;
  }

 private:
  constexpr StreamRef(Device d, void* native) noexcept : device_(d), native_(native) {}
  Device device_;
  void* native_;
};

/// Owning stream. Whoever creates a stream owns it (the training loop its compute stream, each
/// communicator its own communication stream).
class Stream {
 public:
  explicit Stream(Device device = Device::cpu());
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamRef ref() const noexcept { return StreamRef::wrap(device_, native_); }
  operator StreamRef() const noexcept { return ref(); }  // NOLINT(google-explicit-constructor)
  Device device() const noexcept { return device_; }

 private:
  Device device_;
  void* native_ = nullptr;
};

class EventRef;

/// Untimed event for cross-stream ordering: record on the producer, wait on the consumer.
class Event {
 public:
  explicit Event(Device device = Device::cpu());
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Captures the work enqueued on `s` so far.
  void record(StreamRef s);
  /// Makes `s` wait (on the device, not the host) for the recorded work.
  void wait(StreamRef s) const;
  /// Blocks the host until the recorded work has finished.
  void synchronize() const;
  bool query() const;
  Device device() const noexcept { return device_; }

 private:
  friend class EventRef;
  Device device_;
  void* native_ = nullptr;
};

/// The only event type that can be timed. On the CPU it stores a steady-clock timestamp at record().
class TimedEvent {
 public:
  explicit TimedEvent(Device device = Device::cpu());
  ~TimedEvent();
  TimedEvent(TimedEvent&& other) noexcept;
  TimedEvent& operator=(TimedEvent&& other) noexcept;
  TimedEvent(const TimedEvent&) = delete;
  TimedEvent& operator=(const TimedEvent&) = delete;

  void record(StreamRef s);
  void synchronize() const;
  /// Milliseconds between two recorded events (both must have completed).
  static double elapsed_ms(const TimedEvent& start, const TimedEvent& end);

 private:
  Device device_;
  void* native_ = nullptr;
  double host_time_s_ = -1.0;
};

}  // namespace hzp
