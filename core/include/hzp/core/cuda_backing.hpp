// CudaBacking: device memory (cudaMalloc) as a MemoryBacking, so the caching allocator and the ring
// pool hand out GPU memory with the same statistics and tags as on the host (the allocator never
// knows which backing it has). Also the device-memory moves every layer needs: copies between host
// and device and zero fills, enqueued on a stream (synchronous on the host stream).
#pragma once

#include <cstddef>
#include <string_view>

#include "hzp/core/memory_backing.hpp"
#include "hzp/core/stream.hpp"

namespace hzp {

/// cudaMalloc/cudaFree on one device. allocate() returns nullptr when the device is out of memory
/// (cudaErrorMemoryAllocation, whose sticky state is cleared) so the allocator can release its cache
/// and retry; any other CUDA error throws CudaError. cudaMalloc already guarantees 256-byte alignment.
/// Thread-safe (the CUDA runtime is). cudaFree synchronises the device: the caching allocator calls it
/// only from empty_cache() or under a memory limit, never on a step's hot path. In a build without
/// CUDA, constructing one throws UnsupportedError.
class CudaBacking final : public MemoryBacking {
 public:
  static constexpr std::size_t kAlignment = 256;

  explicit CudaBacking(int device = 0);
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  Device device() const noexcept override { return Device::cuda(device_); }
  std::string_view name() const noexcept override { return "cuda"; }
  std::size_t alignment() const noexcept override { return kAlignment; }

 private:
  int device_;
};

/// Copies `bytes` from `src` (on src_device) to `dst` (on dst_device). Host to host is a memcpy on the
/// calling thread. Any copy touching a CUDA device is enqueued on `s` (which must be a CUDA stream)
/// with cudaMemcpyAsync: the host memory must stay valid until the stream reaches the copy (pageable
/// host memory makes the runtime stage it, which in practice returns after the host side is read).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes, StreamRef s);

/// Sets `bytes` bytes at `dst` to zero: memset on the host stream, cudaMemsetAsync on a CUDA stream.
void zero_bytes(void* dst, std::size_t bytes, StreamRef s);

}  // namespace hzp
