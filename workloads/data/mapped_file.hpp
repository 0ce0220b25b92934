// A read-only memory map of a whole file (private to hzp_workloads), and the FNV-1a 64-bit hash the
// token-file sources record as the file's content hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace hzp::workloads::detail {

/// Maps `path` read-only (MAP_PRIVATE) for the object's lifetime; the descriptor is closed at once.
/// IoError naming the path and the system's reason when it is missing, unreadable, not a regular
/// file or cannot be mapped. An empty file maps to an empty span.
class MappedFile {
 public:
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

/// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3), over the bytes.
std::uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept;

}  // namespace hzp::workloads::detail
