// HostBacking over posix_memalign, and the shared byte-size formatter.
#include "hzp/core/memory_backing.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace hzp {

void* HostBacking::allocate(std::size_t bytes) {
  HZP_CHECK(bytes > 0, "host backing asked for a zero-byte segment");
  void* p = nullptr;
  const int rc = posix_memalign(&p, kAlignment, bytes);
  if (rc == ENOMEM) return nullptr;  // the allocator releases its cache and retries
  HZP_CHECK(rc == 0, "posix_memalign(", kAlignment, ", ", bytes, ") failed with code ", rc);
  return p;
}

void HostBacking::deallocate(void* ptr, std::size_t) noexcept { std::free(ptr); }

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%zu B", bytes);
  else
    std::snprintf(buf, sizeof(buf), "%.2f %s (%zu B)", v, kUnits[u], bytes);
  return buf;
}

}  // namespace hzp
