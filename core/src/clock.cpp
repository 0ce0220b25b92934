// Clock implementations over clock_gettime.
#include "hzp/core/clock.hpp"

#include <time.h>

namespace hzp {
namespace {
double read(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

double wall_seconds() noexcept { return read(CLOCK_MONOTONIC); }
double thread_cpu_seconds() noexcept { return read(CLOCK_THREAD_CPUTIME_ID); }
double process_cpu_seconds() noexcept { return read(CLOCK_PROCESS_CPUTIME_ID); }
double unix_seconds() noexcept { return read(CLOCK_REALTIME); }

}  // namespace hzp
