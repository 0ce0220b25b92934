// Which of this process's memory is a SharedBuffer (a sender's question: can this message go by mapping?), and
// the receiver's side: peers' shared buffers mapped read-only on first use, found again by (pid, buffer id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hzp::coll::detail {

/// Where a mapped message's bytes are: a peer process's shared buffer (its memfd's descriptor number in that
/// process, an id never reused within the process, the file's size) and the message's offset in it.
struct SharedRange {
  std::int64_t pid = 0;
  std::int32_t fd = -1;
  std::uint64_t id = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t offset = 0;
};

/// The shared buffer of this process that holds [p, p + bytes) whole, or nothing.
std::optional<SharedRange> find_shared_range(const void* p, std::size_t bytes);

/// One page of this process's shared memory holding kMappedProbeWord at offset 0, made on first use: what
/// machine peers map at setup to learn whether they can.
SharedRange mapped_probe();
inline constexpr std::uint64_t kMappedProbeWord = 0x6878702d6d617021ull;

/// A receiver's mappings of its peers' shared buffers (one set per transport; not thread-safe: used under the
/// transport's lock). The least recently used is unmapped beyond kMaxMappings, so buffers a peer freed do not
/// stay mapped for ever; a pointer returned is valid until the next call.
class PeerMappings {
 public:
  PeerMappings() = default;
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  /// The first byte of `r` (at r.offset) in this process, mapping the peer's buffer if needed; null with
  /// `error` set when the kernel refuses (/proc/<pid>/fd/<fd> cannot be opened or mapped).
  const std::byte* find(const SharedRange& r, std::string& error);

  static constexpr std::size_t kMaxMappings = 32;

 private:
  struct Mapping {
    std::int64_t pid = 0;
    std::uint64_t id = 0;
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    std::uint64_t last_use = 0;
  };
  std::vector<Mapping> maps_;
  std::uint64_t clock_ = 0;
};

}  // namespace hzp::coll::detail
