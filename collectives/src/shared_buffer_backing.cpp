// SharedBufferBacking: each segment one SharedBuffer, kept by its address until it is given back.
#include "hzp/collectives/shared_buffer_backing.hpp"

#include <utility>

namespace hzp::coll {

void* SharedBufferBacking::allocate(std::size_t bytes) {
  SharedBuffer b = SharedBuffer::allocate(bytes);
  void* p = b.data();
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.emplace(p, std::move(b));
  return p;
}

void SharedBufferBacking::deallocate(void* ptr, std::size_t) noexcept {
  SharedBuffer gone;  // unmapped after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = buffers_.find(ptr);
  if (it == buffers_.end()) return;
  gone = std::move(it->second);
  buffers_.erase(it);
}

}  // namespace hzp::coll
