// Private bridge between the device-neutral stream/event/device code and the CUDA runtime.
// Implemented in core/cuda/cuda_runtime_shim.cpp when HZP_HAVE_CUDA, else in cuda_absent.cpp,
// where every call throws UnsupportedError (or reports "no device") so CPU builds link unchanged.
#pragma once

#include <cstddef>
#include <string>

namespace hzp::cuda_shim {

int device_count() noexcept;
std::string runtime_version();
std::string device_name(int index);

void* stream_create(int device);
void stream_destroy(void* s) noexcept;
void stream_synchronize(void* s);
bool stream_query(void* s);

void* event_create(int device, bool timed);
void event_destroy(void* e) noexcept;
void event_record(void* e, void* stream);
void event_wait(void* e, void* stream);
void event_synchronize(void* e);
bool event_query(void* e);
double event_elapsed_ms(void* start, void* end);

/// Throws CudaError unless `device` names a usable device.
void check_device_index(int device);
/// cudaSetDevice for the calling thread.
void set_device(int device);
/// cudaMalloc on `device`; nullptr when out of memory (the error is cleared), else throws.
void* device_malloc(int device, std::size_t bytes);
void device_free(int device, void* ptr) noexcept;
void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream);
void memset_async(void* dst, int value, std::size_t bytes, void* stream);

}  // namespace hzp::cuda_shim
