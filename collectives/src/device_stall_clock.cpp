// DeviceStallClock's event reuse and settling, and the per-thread observation (device_stall_clock.hpp).
#include "hzp/collectives/device_stall_clock.hpp"

namespace hzp::coll {
namespace {
thread_local DeviceStallClock* t_observed = nullptr;
}

void observe_device_waits(DeviceStallClock* clock) noexcept { t_observed = clock; }
DeviceStallClock* observed_device_waits() noexcept { return t_observed; }

DeviceStallClock::Mark& DeviceStallClock::next_mark(StallKind kind) {
  // Events are made once and reused step after step: a step issues the same collectives each time.
  if (used_ == marks_.size()) marks_.push_back({TimedEvent(stream_.device()), TimedEvent(stream_.device()), kind});
  Mark& m = marks_[used_++];
  m.kind = kind;
  return m;
}

std::vector<Stall> DeviceStallClock::settle() {
  std::vector<Stall> out;
  out.reserve(used_);
  for (std::size_t i = 0; i < used_; ++i)
    out.push_back({TimedEvent::elapsed_ms(marks_[i].before, marks_[i].after) * 1e-3, marks_[i].kind});
  used_ = 0;
  return out;
}

}  // namespace hzp::coll
