// CachingAllocator: a block-splitting, coalescing caching allocator over a MemoryBacking, in the
// shape of PyTorch's CUDA caching allocator (written from scratch): requests are rounded, carved
// best-fit from cached segments in a small or a large pool, split, coalesced on free, and segments
// go back to the backing only on empty_cache() or when a limit forces it. Statistics (allocated,
// reserved, peaks, slack, external fragmentation, bytes per AllocationTag) feed the results file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "hzp/core/allocation_tag.hpp"
#include "hzp/core/device.hpp"
#include "hzp/core/memory_backing.hpp"

namespace hzp {

/// Size classes and limits. Defaults follow PyTorch's CUDA allocator, so CPU runs fragment the way
/// GPU runs would. All sizes in bytes.
struct CachingAllocatorConfig {
  /// Every request is rounded up to a multiple of this (and blocks never get smaller).
  std::size_t round_bytes = 512;
  /// Requests up to this size go to the small pool...
  std::size_t small_request_max = std::size_t{1} << 20;
  /// ...which carves them from segments of this size, so many tiny tensors cost one backing call.
  std::size_t small_segment_bytes = std::size_t{2} << 20;
  /// Large requests below this size share segments of medium_segment_bytes (0 turns the tier off).
  std::size_t medium_request_max = std::size_t{10} << 20;
  std::size_t medium_segment_bytes = std::size_t{20} << 20;
  /// Other large requests get a segment of their size rounded up to this.
  std::size_t large_segment_round = std::size_t{2} << 20;
  /// Upper bound on reserved bytes (0 = none). Reaching it first releases cached segments, then
  /// raises OutOfMemoryError; it lets a CPU run mimic a GPU's memory capacity.
  std::size_t reserved_limit = 0;

  /// Throws ConfigError naming the offending values.
  void validate() const;
};

/// Per-tag usage. `requested` counts the bytes callers asked for (what formulas such as 2N bytes of
/// bf16 parameters predict); `allocated` counts whole blocks (rounding and unsplit tails included).
struct TagStats {
  std::size_t allocated_bytes = 0;
  std::size_t requested_bytes = 0;
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  std::size_t live_allocations = 0;
};

/// A consistent snapshot of the allocator (taken under its lock).
struct AllocatorStats {
  std::size_t allocated_bytes = 0;  // bytes in live blocks
  std::size_t requested_bytes = 0;  // bytes asked for by live allocations
  std::size_t reserved_bytes = 0;   // bytes in segments held from the backing
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::size_t free_bytes = 0;            // reserved - allocated: cached, in free blocks
  std::size_t largest_free_block = 0;    // over both pools
  std::size_t num_segments = 0;          // segments held now
  std::uint64_t num_backing_allocs = 0;  // cumulative segments obtained from the backing
  std::uint64_t num_backing_frees = 0;   // cumulative segments returned to the backing
  std::uint64_t num_allocs = 0;          // cumulative successful allocations (non-zero size)
  std::uint64_t num_frees = 0;
  std::uint64_t num_alloc_retries = 0;  // allocations that released cached segments and retried
  std::uint64_t num_ooms = 0;           // allocations that ended in OutOfMemoryError
  std::array<TagStats, kNumAllocationTags> by_tag{};

  const TagStats& tag(AllocationTag t) const noexcept { return by_tag[tag_index(t)]; }
  /// 1 - allocated/reserved: the share of reserved memory not in use (0 when nothing is reserved).
  double slack() const noexcept {
    return reserved_bytes == 0
               ? 0.0
               : 1.0 - static_cast<double>(allocated_bytes) / static_cast<double>(reserved_bytes);
  }
  /// 1 - largest free block / free bytes: how scattered the cached memory is (0 when nothing is
  /// free).
  double ext_frag() const noexcept {
    return free_bytes == 0
               ? 0.0
               : 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
  }
};

class CachingAllocator;

/// Owning, move-only handle to one allocation; frees it on destruction. Must not outlive its
/// allocator. An empty handle (default, moved-from, or a zero-byte request) has data() == nullptr.
class Allocation {
 public:
  Allocation() noexcept = default;
  ~Allocation() { reset(); }
  Allocation(Allocation&& other) noexcept;
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* data() const noexcept { return ptr_; }
  template <typename T>
  T* data_as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  /// Bytes requested (the block may be larger).
  std::size_t size() const noexcept { return size_; }
  AllocationTag tag() const noexcept { return tag_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  /// Frees now; the handle becomes empty.
  void reset() noexcept;

 private:
  friend class CachingAllocator;
  Allocation(CachingAllocator* owner, void* ptr, std::size_t size, AllocationTag tag) noexcept
      : owner_(owner), ptr_(ptr), size_(size), tag_(tag) {}
  CachingAllocator* owner_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  AllocationTag tag_ = AllocationTag::other;
};

/// Thread-safe caching allocator. Every public member may be called from any thread.
/// Deterministic: the same sequence of calls yields the same addresses relative to segment bases
/// and the same statistics (best fit breaks size ties by lowest address).
class CachingAllocator {
 public:
  /// `backing` must outlive the allocator. Throws ConfigError for an invalid config.
  explicit CachingAllocator(MemoryBacking& backing, CachingAllocatorConfig config = {});
  /// Returns every segment to the backing. Live allocations at this point are a caller bug: they
  /// are reported on stderr and their memory is released anyway.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Allocates `bytes` (aligned to the backing's alignment: 256 B for host and CUDA) tagged `tag`.
  /// Zero bytes gives an empty handle and changes no statistic. Throws OutOfMemoryError naming the
  /// requested, allocated, reserved and limit bytes when neither the cache nor the backing can
  /// serve.
  Allocation allocate(std::size_t bytes, AllocationTag tag);
  /// Same, unowned: pair with free_raw(). Returns nullptr for zero bytes.
  void* allocate_raw(std::size_t bytes, AllocationTag tag);
  /// Frees a pointer returned by allocate_raw (nullptr is a no-op). A pointer this allocator did
  /// not hand out, or a double free, throws PreconditionError.
  void free_raw(void* ptr);

  /// Returns all fully free segments to the backing; returns the bytes released.
  std::size_t empty_cache();
  AllocatorStats stats() const;
  /// Sets every peak (global and per tag) to its current value, e.g. at the start of a step.
  void reset_peaks();

  /// The block size a request of `bytes` occupies (before any unsplit tail).
  std::size_t rounded_size(std::size_t bytes) const noexcept;
  /// The size of the segment a request of `bytes` would get if no cached block fits it.
  std::size_t segment_size_for(std::size_t bytes) const noexcept;

  Device device() const noexcept;
  const MemoryBacking& backing() const noexcept { return backing_; }
  const CachingAllocatorConfig& config() const noexcept { return config_; }

 private:
  struct State;
  MemoryBacking& backing_;
  CachingAllocatorConfig config_;
  std::unique_ptr<State> state_;
};

}  // namespace hzp
