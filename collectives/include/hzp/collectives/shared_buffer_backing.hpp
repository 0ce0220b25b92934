// SharedBufferBacking: a MemoryBacking whose segments are SharedBuffers. With collectives.mapped_buffers the harness
// gives the run's caching allocator this one instead of HostBacking, so everything the schedulers allocate
// (parameters, gradients, shards, the ring pool) is memory the shared-memory transport sends by mapping
// (docs/collectives.md "Mapped buffers"). It lives here, not in core: core cannot see SharedBuffer, and only the
// harness, which builds the allocator, knows the option.
#pragma once

#include <cstddef>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "hzp/collectives/shared_buffer.hpp"
#include "hzp/core/memory_backing.hpp"

namespace hzp::coll {

class SharedBufferBacking final : public MemoryBacking {
 public:
  /// A SharedBuffer of `bytes` rounded up to whole pages (the allocator's segments are whole MiB, so its reserved
  /// bytes stay exact). Throws IoError when the kernel refuses the memfd or its mapping.
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  Device device() const noexcept override { return Device::cpu(); }
  std::string_view name() const noexcept override { return "host (shared)"; }
  /// Pages in fact; HostBacking's guarantee is announced so that the allocator lays blocks out exactly as over
  /// host memory (the same addresses relative to segments, the same statistics).
  std::size_t alignment() const noexcept override { return HostBacking::kAlignment; }

 private:
  std::mutex mu_;
  std::unordered_map<void*, SharedBuffer> buffers_;
};

}  // namespace hzp::coll
