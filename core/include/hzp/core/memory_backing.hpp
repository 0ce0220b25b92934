// Memory backings: where the caching allocator and the ring pool get their large underlying
// segments from. HostBacking (aligned host memory) serves CPU runs; CudaBacking (cudaMalloc,
// cuda_backing.hpp) is one more subclass, so the allocator and the pool never change for it.
// Also the out-of-memory error type and a byte-size formatter shared by the memory code.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"

namespace hzp {

/// Source of large segments. Implementations must be thread-safe, or be used by one owner only (the
/// caching allocator calls its backing under its own mutex).
class MemoryBacking {
 public:
  virtual ~MemoryBacking() = default;

  /// Returns `bytes` bytes aligned to alignment(), or nullptr when the device is out of memory (so
  /// the caller can release cached memory and retry, as the allocator does). Other failures throw.
  /// `bytes` > 0.
  virtual void* allocate(std::size_t bytes) = 0;
  /// Returns a segment obtained from allocate(); `bytes` is the size it was allocated with.
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  /// Device whose memory this backing hands out.
  virtual Device device() const noexcept = 0;
  /// Short name for statistics and messages, e.g. "host".
  virtual std::string_view name() const noexcept = 0;
  /// Guaranteed alignment of every returned segment.
  virtual std::size_t alignment() const noexcept = 0;
};

/// Aligned host memory (posix_memalign). 256-byte alignment matches cudaMalloc's guarantee, so code
/// tested on the CPU makes no alignment assumption the GPU would break. Stateless and thread-safe.
class HostBacking final : public MemoryBacking {
 public:
  static constexpr std::size_t kAlignment = 256;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  Device device() const noexcept override { return Device::cpu(); }
  std::string_view name() const noexcept override { return "host"; }
  std::size_t alignment() const noexcept override { return kAlignment; }
};

/// "3.50 MiB (3670016 B)"-style text: readable, yet exact for tests and for debugging limits.
std::string format_bytes(std::size_t bytes);

/// Rounds `n` up to a multiple of `multiple` (> 0).
constexpr std::size_t round_up(std::size_t n, std::size_t multiple) noexcept {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace hzp
