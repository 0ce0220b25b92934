// The receiver's side of mapped messages: a peer's shared buffer is opened through /proc/<pid>/fd/<fd> (allowed
// between processes of one user without ptrace rights, unlike process_vm_readv under Yama) and mapped read-only.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shared_buffer_registry.hpp"

namespace hzp::coll::detail {

PeerMappings::~PeerMappings() {
  for (const Mapping& m : maps_) munmap(m.base, m.bytes);
}

const std::byte* PeerMappings::find(const SharedRange& r, std::string& error) {
  ++clock_;
  for (Mapping& m : maps_) {
    if (m.pid == r.pid && m.id == r.id) {
      m.last_use = clock_;
      return m.base + r.offset;
    }
  }
  const std::string path = "/proc/" + std::to_string(r.pid) + "/fd/" + std::to_string(r.fd);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "open(" + path + "): " + std::strerror(errno);
    return nullptr;
  }
  // The sender keeps the buffer (and so this descriptor number) alive while its message is out, so the file
  // opened is the one named; its pages are faulted in once here, not piece by piece during the copies.
  void* p = mmap(nullptr, r.file_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    error = "mmap(" + path + ", " + std::to_string(r.file_bytes) + " bytes): " + std::strerror(e);
    return nullptr;
  }
  if (maps_.size() >= kMaxMappings) {
    const auto lru = std::min_element(maps_.begin(), maps_.end(),
                                      [](const Mapping& a, const Mapping& b) { return a.last_use < b.last_use; });
    munmap(lru->base, lru->bytes);
    maps_.erase(lru);
  }
  maps_.push_back(Mapping{r.pid, r.id, static_cast<std::byte*>(p), r.file_bytes, clock_});
  return maps_.back().base + r.offset;
}

}  // namespace hzp::coll::detail
