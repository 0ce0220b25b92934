// Stream and event implementations: synchronous host semantics on the CPU, the CUDA bridge otherwise.
#include "hzp/core/stream.hpp"

#include <utility>

#include "cuda_shim.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"

namespace hzp {

void StreamRef::synchronize() const {
  if (device_.is_cuda()) cuda_shim::stream_synchronize(native_);
}
bool StreamRef::query() const { return device_.is_cpu() || cuda_shim::stream_query(native_); }

Stream::Stream(Device device) : device_(device) {
  if (device.is_cuda()) native_ = cuda_shim::stream_create(device.index);
}
Stream::~Stream() {
  if (device_.is_cuda()) cuda_shim::stream_destroy(native_);
}
Stream::Stream(Stream&& o) noexcept : device_(o.device_), native_(std::exchange(o.native_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (device_.is_cuda()) cuda_shim::stream_destroy(native_);
    device_ = o.device_;
    native_ = std::exchange(o.native_, nullptr);
  }
  return *this;
}

namespace {
void check_same_device(Device event_dev, StreamRef s) {
  HZP_CHECK(event_dev == s.device(), "event on ", to_string(event_dev), " used with a stream on ",
            to_string(s.device()));
}
}  // namespace

Event::Event(Device device) : device_(device) {
  if (device.is_cuda()) native_ = cuda_shim::event_create(device.index, /*timed=*/false);
}
Event::~Event() {
  if (device_.is_cuda()) cuda_shim::event_destroy(native_);
}
Event::Event(Event&& o) noexcept : device_(o.device_), native_(std::exchange(o.native_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (device_.is_cuda()) cuda_shim::event_destroy(native_);
    device_ = o.device_;
    native_ = std::exchange(o.native_, nullptr);
  }
  return *this;
}
void Event::record(StreamRef s) {
  check_same_device(device_, s);
  if (device_.is_cuda()) cuda_shim::event_record(native_, s.native());
}
void Event::wait(StreamRef s) const {
  check_same_device(device_, s);
  if (device_.is_cuda()) cuda_shim::event_wait(native_, s.native());
}
void Event::synchronize() const {
  if (device_.is_cuda()) cuda_shim::event_synchronize(native_);
}
bool Event::query() const { return device_.is_cpu() || cuda_shim::event_query(native_); }

TimedEvent::TimedEvent(Device device) : device_(device) {
  if (device.is_cuda()) native_ = cuda_shim::event_create(device.index, /*timed=*/true);
}
TimedEvent::~TimedEvent() {
  if (device_.is_cuda()) cuda_shim::event_destroy(native_);
}
TimedEvent::TimedEvent(TimedEvent&& o) noexcept
    : device_(o.device_), native_(std::exchange(o.native_, nullptr)), host_time_s_(o.host_time_s_) {}
TimedEvent& TimedEvent::operator=(TimedEvent&& o) noexcept {
  if (this != &o) {
    if (device_.is_cuda()) cuda_shim::event_destroy(native_);
    device_ = o.device_;
    native_ = std::exchange(o.native_, nullptr);
    host_time_s_ = o.host_time_s_;
  }
  return *this;
}
void TimedEvent::record(StreamRef s) {
  check_same_device(device_, s);
  if (device_.is_cuda())
    cuda_shim::event_record(native_, s.native());
  else
    host_time_s_ = wall_seconds();
}
void TimedEvent::synchronize() const {
  if (device_.is_cuda()) cuda_shim::event_synchronize(native_);
}
double TimedEvent::elapsed_ms(const TimedEvent& start, const TimedEvent& end) {
  HZP_CHECK(start.device_ == end.device_, "timed events on different devices: ", to_string(start.device_),
            " and ", to_string(end.device_));
  if (start.device_.is_cuda()) return cuda_shim::event_elapsed_ms(start.native_, end.native_);
  HZP_CHECK(start.host_time_s_ >= 0 && end.host_time_s_ >= 0,
            "elapsed_ms needs both events recorded (start recorded: ", start.host_time_s_ >= 0,
            ", end recorded: ", end.host_time_s_ >= 0, ")");
  return (end.host_time_s_ - start.host_time_s_) * 1e3;
}

}  // namespace hzp
