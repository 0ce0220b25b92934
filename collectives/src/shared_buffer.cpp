// SharedBuffer: memfd pages mapped into this process, and the process-wide registry of them that a sender
// consults to send a message by mapping instead of through the slots.
#include "hzp/collectives/shared_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "hzp/core/error.hpp"
#include "shared_buffer_registry.hpp"

namespace hzp::coll {
namespace {

struct Entry {
  std::uintptr_t end = 0;
  int fd = -1;
  std::uint64_t id = 0;
  std::size_t bytes = 0;
};

// Keyed by base address. Allocation and release are rare (buffers live for a run); a lookup per message.
std::mutex registry_mu;
std::map<std::uintptr_t, Entry>& registry() {
  static std::map<std::uintptr_t, Entry> m;
  return m;
}
std::atomic<std::uint64_t> next_id{1};

}  // namespace

SharedBuffer SharedBuffer::allocate(std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  // One fix for every failure here. Training runs allocate shared buffers only under collectives.mapped_buffers; the
  // collectives benchmark always does (its control is the same buffers through the slots).
  constexpr const char* fix = ". Fix: give the job more memory (these pages count as shared memory), or, in a run, "
                              "collectives.mapped_buffers = false (private memory)";
  const int fd = memfd_create("hzp-shared-buffer", MFD_CLOEXEC);
  if (fd < 0)
    HZP_THROW(IoError, "memfd_create for a shared buffer of ", rounded, " bytes failed: ", std::strerror(errno), fix);
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    const int e = errno;
    close(fd);
    HZP_THROW(IoError, "sizing a shared buffer to ", rounded, " bytes failed: ", std::strerror(e), fix);
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    HZP_THROW(IoError, "mapping a shared buffer of ", rounded, " bytes failed: ", std::strerror(e), fix);
  }
  SharedBuffer b;
  b.base_ = static_cast<std::byte*>(p);
  b.bytes_ = rounded;
  b.fd_ = fd;
  std::lock_guard<std::mutex> lock(registry_mu);
  registry()[reinterpret_cast<std::uintptr_t>(p)] =
      Entry{reinterpret_cast<std::uintptr_t>(p) + rounded, fd, next_id.fetch_add(1), rounded};
  return b;
}

void SharedBuffer::release() noexcept {
  if (base_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    registry().erase(reinterpret_cast<std::uintptr_t>(base_));
  }
  munmap(base_, bytes_);
  close(fd_);
  base_ = nullptr;
  bytes_ = 0;
  fd_ = -1;
}

SharedBuffer::~SharedBuffer() { release(); }

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

namespace detail {

std::optional<SharedRange> find_shared_range(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(registry_mu);
  const auto& m = registry();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return std::nullopt;
  --it;
  if (a + bytes > it->second.end) return std::nullopt;
  return SharedRange{static_cast<std::int64_t>(getpid()), it->second.fd, it->second.id, it->second.bytes,
                     a - it->first};
}

SharedRange mapped_probe() {
  static const SharedBuffer probe = [] {
    SharedBuffer b = SharedBuffer::allocate(1);
    std::memcpy(b.data(), &kMappedProbeWord, sizeof kMappedProbeWord);
    return b;
  }();
  return *find_shared_range(probe.data(), sizeof kMappedProbeWord);
}

}  // namespace detail
}  // namespace hzp::coll
