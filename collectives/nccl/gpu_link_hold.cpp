// GpuLinkHold (gpu_link_hold.hpp): two host functions on the stream, a wall-clock stamp (and the ready time a
// booking gives it) and a sleep until ready + modelled time. Host functions may not call CUDA, and do not: they
// read the clock, book (a lock and arithmetic) and sleep (clock_nanosleep through LinkEmulator::sleep_until, never
// spinning).
#include <cuda_runtime_api.h>

#include "hzp/collectives/gpu_link_hold.hpp"
#include "hzp/collectives/link_emulator.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_check.hpp"

namespace hzp::coll {

void GpuLinkHold::stamp(void* self) {
  auto* h = static_cast<GpuLinkHold*>(self);
  h->start_s_ = wall_seconds();
  h->ready_s_ = h->ready_at_ ? h->ready_at_(h->start_s_) : h->start_s_;
}

void GpuLinkHold::sleep(void* self) {
  auto* h = static_cast<GpuLinkHold*>(self);
  const double now = wall_seconds();
  const double until = h->ready_s_ + h->modelled_s_;
  if (until > now) LinkEmulator::sleep_until(until);
  h->slept_s_ = until > now ? wall_seconds() - now : 0.0;
}

void GpuLinkHold::start(StreamRef s, std::function<double(double)> ready_at) {
  ready_at_ = std::move(ready_at);
  HZP_CHECK(s.device().is_cuda(), "GpuLinkHold needs a CUDA stream, got one on ", to_string(s.device()));
  HZP_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(s.native()), &GpuLinkHold::stamp, this));
}

void GpuLinkHold::finish(StreamRef s, double modelled_s) {
  modelled_s_ = modelled_s;
  HZP_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(s.native()), &GpuLinkHold::sleep, this));
}

}  // namespace hzp::coll
