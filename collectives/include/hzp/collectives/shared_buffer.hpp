// Host buffers that the other ranks of a machine can map (memfd pages): a message sent from one over the
// shared-memory transport is read by its receiver straight from these pages, one copy instead of the slots' two
// (docs/collectives.md "Mapped buffers"). Anywhere else it is an ordinary page-aligned host buffer.
#pragma once

#include <cstddef>

namespace hzp::coll {

class SharedBuffer {
 public:
  SharedBuffer() = default;
  /// `bytes` rounded up to whole pages (at least one), zeroed. Throws IoError when the kernel refuses.
  static SharedBuffer allocate(std::size_t bytes);
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  std::byte* data() const noexcept { return base_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
};

}  // namespace hzp::coll
