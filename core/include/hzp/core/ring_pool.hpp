// RingPool: the AsyncHZP communication pool (AsyncHZP, arXiv 2510.20111 §4.2; docs/architecture.md,
// asynchzp). One fixed region, allocated once and kept for the whole run, carved into named rings
// ("all_gather", "reduce_scatter", ...), each a contiguous ring buffer reused cyclically by one
// operation type. Slots never wrap across a ring's
// end; they are released in any order and reclaimed in FIFO order. Occupancy, stalls and wrap waste
// are counted per ring for the results file.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/memory_backing.hpp"

namespace hzp {

/// One ring of the pool: its name and capacity in bytes (rounded up to the pool's alignment).
struct RingSpec {
  std::string name;
  std::size_t capacity_bytes = 0;
};

struct RingPoolOptions {
  /// Every slot starts at a multiple of this and occupies a multiple of it (power of two, and a
  /// divisor of the memory source's alignment, so slots are as aligned as the source guarantees).
  std::size_t alignment = 256;
  /// Deadline of acquire() when none is given. A wait this long means a lost release: a hang made
  /// an error.
  std::chrono::nanoseconds default_timeout = std::chrono::seconds(60);
};

/// Index of a ring, obtained once from RingPool::ring_id so the hot path does no name lookup.
struct RingId {
  std::uint32_t index = 0;
  friend bool operator==(RingId, RingId) = default;
};

/// Per-ring statistics. `in_use` counts what blocks new acquires: live slots, released slots still
/// behind an older live one, and bytes skipped at the end of the ring by a slot that wrapped.
struct RingStats {
  std::string name;
  std::size_t capacity_bytes = 0;
  std::size_t in_use_bytes = 0;
  std::size_t live_bytes = 0;  // slots acquired and not yet released (aligned sizes)
  std::size_t live_slots = 0;
  std::size_t peak_in_use_bytes = 0;
  std::uint64_t acquires = 0;             // successful acquires, blocking or not
  std::uint64_t stalls = 0;               // blocking acquires that had to wait (timeouts included)
  double stall_seconds = 0.0;             // wall time spent waiting in those
  std::uint64_t timeouts = 0;             // waits that ended in TimeoutError
  std::uint64_t failed_try_acquires = 0;  // try_acquire calls that found no room
  std::uint64_t wraps = 0;                // slots placed at the start because the end lacked room
  std::size_t wrap_waste_bytes = 0;       // cumulative bytes skipped by those wraps
  std::size_t waiters = 0;                // threads blocked in acquire right now

  double occupancy() const noexcept {
    return capacity_bytes == 0
               ? 0.0
               : static_cast<double>(in_use_bytes) / static_cast<double>(capacity_bytes);
  }
};

class CachingAllocator;
class RingPool;

/// A contiguous slot of one ring; move-only; releases itself on destruction. May be moved to and
/// released from another thread (the usual case: a comm thread fills it, the compute thread frees
/// it). Must not outlive its pool.
class RingSlot {
 public:
  RingSlot() noexcept = default;
  ~RingSlot() { release(); }
  RingSlot(RingSlot&& other) noexcept;
  RingSlot& operator=(RingSlot&& other) noexcept;
  RingSlot(const RingSlot&) = delete;
  RingSlot& operator=(const RingSlot&) = delete;

  void* data() const noexcept { return ptr_; }
  template <typename T>
  T* data_as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  /// Bytes requested (the slot occupies this rounded up to the pool's alignment).
  std::size_t size() const noexcept { return size_; }
  /// Byte offset of the slot from the start of its ring.
  std::size_t offset() const noexcept { return offset_; }
  RingId ring() const noexcept { return ring_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  /// Gives the slot back now; the handle becomes empty. Its space is reclaimed once every older
  /// slot of the same ring has been released too.
  void release() noexcept;

 private:
  friend class RingPool;
  RingSlot(RingPool* pool, RingId ring, std::uint64_t seq, void* ptr, std::size_t size,
           std::size_t offset) noexcept
      : pool_(pool), ring_(ring), seq_(seq), ptr_(ptr), size_(size), offset_(offset) {}
  RingPool* pool_ = nullptr;
  RingId ring_{};
  std::uint64_t seq_ = 0;
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  std::size_t offset_ = 0;
};

/// The pool. Thread-safe: acquire, try_acquire, release and stats may be called from any thread.
/// Waiting is on a condition variable per ring, so a release wakes only that ring's waiters; when
/// several threads wait on one ring, which one proceeds first is unspecified (one producer per ring
/// is the intended use).
class RingPool {
 public:
  /// Allocates the region once from `backing` (which must outlive the pool). Throws
  /// PreconditionError for empty, duplicate or zero-capacity rings, OutOfMemoryError if the backing
  /// refuses.
  RingPool(MemoryBacking& backing, std::vector<RingSpec> rings, RingPoolOptions options = {});
  /// Takes the region as one allocation tagged `comm` from `allocator`, so the pool shows up in the
  /// allocator's statistics by component. The allocator must outlive the pool.
  RingPool(CachingAllocator& allocator, std::vector<RingSpec> rings, RingPoolOptions options = {});
  /// Returns the region. Slots still held are a caller bug, reported on stderr.
  ~RingPool();
  RingPool(const RingPool&) = delete;
  RingPool& operator=(const RingPool&) = delete;

  /// The ring named `name`; PreconditionError listing the known names if there is none.
  RingId ring_id(std::string_view name) const;
  std::size_t num_rings() const noexcept;
  const std::string& ring_name(RingId ring) const;
  std::size_t ring_capacity(RingId ring) const;

  /// A slot of `bytes` (> 0) from `ring`, waiting for releases when the ring lacks room, at most
  /// `timeout` (then TimeoutError naming ring, bytes, capacity and in-use bytes). A request larger
  /// than the ring's capacity can never succeed and throws PreconditionError at once.
  RingSlot acquire(RingId ring, std::size_t bytes, std::chrono::nanoseconds timeout);
  /// acquire() with the pool's default timeout.
  RingSlot acquire(RingId ring, std::size_t bytes);
  /// A slot if the ring has room now, else an empty slot (never waits). Too large still throws.
  RingSlot try_acquire(RingId ring, std::size_t bytes);

  RingStats stats(RingId ring) const;
  std::vector<RingStats> stats() const;
  /// Sets each ring's peak in-use bytes to its current value.
  void reset_peaks();
  /// Bytes the pool holds for its whole life (the sum of ring capacities): what the harness
  /// reports.
  std::size_t reserved_bytes() const noexcept;
  Device device() const noexcept;
  std::size_t alignment() const noexcept;

 private:
  friend class RingSlot;
  struct State;
  void release(RingId ring, std::uint64_t seq) noexcept;
  RingSlot acquire_impl(RingId ring, std::size_t bytes, bool wait,
                        std::chrono::nanoseconds timeout);
  std::unique_ptr<State> state_;
};

}  // namespace hzp
