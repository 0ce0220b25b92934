// CUDA runtime implementation of the stream/event/device bridge (core/src/cuda_shim.hpp).
// Streams are created non-blocking so they never synchronise with the legacy default stream;
// untimed events are created with cudaEventDisableTiming (cheaper, and ordering is all they do).
#include <cuda_runtime_api.h>

#include "../src/cuda_shim.hpp"
#include "hzp/core/cuda_check.hpp"

namespace hzp::cuda_shim {
namespace {
// Scoped device switch: a stream or event belongs to the device current at its creation.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    HZP_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) HZP_CUDA_CHECK(cudaSetDevice(device));
    target_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != target_) (void)cudaSetDevice(previous_);  // destructors never throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int target_ = 0;
};
}  // namespace

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return {};
  return prop.name;
}

void* stream_create(int device) {
  DeviceGuard g(device);
  cudaStream_t s = nullptr;
  HZP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void stream_destroy(void* s) noexcept {
  if (s) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
}
void stream_synchronize(void* s) { HZP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s))); }
bool stream_query(void* s) {
  const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(s));
  if (e == cudaErrorNotReady) return false;
  HZP_CUDA_CHECK(e);
  return true;
}

void* event_create(int device, bool timed) {
  DeviceGuard g(device);
  cudaEvent_t e = nullptr;
  HZP_CUDA_CHECK(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
void event_destroy(void* e) noexcept {
  if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
}
void event_record(void* e, void* s) {
  HZP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s)));
}
void event_wait(void* e, void* s) {
  HZP_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0));
}
void event_synchronize(void* e) { HZP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e))); }
bool event_query(void* e) {
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
  if (r == cudaErrorNotReady) return false;
  HZP_CUDA_CHECK(r);
  return true;
}
double event_elapsed_ms(void* start, void* end) {
  float ms = 0.f;
  HZP_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

void check_device_index(int device) {
  const int n = device_count();
  if (device >= n)
    HZP_THROW(CudaError, "CUDA device ", device, " requested but ", n, " device(s) are usable on this machine");
}
void set_device(int device) { HZP_CUDA_CHECK(cudaSetDevice(device)); }
void* device_malloc(int device, std::size_t bytes) {
  DeviceGuard g(device);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky, but clear it so the next check does not see it
    return nullptr;
  }
  HZP_CUDA_CHECK(e);
  return p;
}
void device_free(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != device) (void)cudaSetDevice(device);
  (void)cudaFree(ptr);  // destructors never throw
  if (previous != device) (void)cudaSetDevice(previous);
}
void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  HZP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}
void memset_async(void* dst, int value, std::size_t bytes, void* stream) {
  HZP_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
}
}  // namespace hzp::cuda_shim
