// The CUDA bridge of a build without CUDA: no devices, and a clear error for any CUDA object.
#include "cuda_shim.hpp"
#include "hzp/core/error.hpp"

namespace hzp::cuda_shim {
namespace {
[[noreturn]] void absent(const char* what) {
  HZP_THROW(UnsupportedError, what, " needs the CUDA backend, and this build has none: reconfigure with "
            "-DHZP_CUDA=ON on a machine with the CUDA toolkit");
}
}  // namespace

int device_count() noexcept { return 0; }
std::string runtime_version() { return "none"; }
std::string device_name(int) { return {}; }
void* stream_create(int) { absent("a CUDA stream"); }
void stream_destroy(void*) noexcept {}
void stream_synchronize(void*) { absent("a CUDA stream"); }
bool stream_query(void*) { absent("a CUDA stream"); }
void* event_create(int, bool) { absent("a CUDA event"); }
void event_destroy(void*) noexcept {}
void event_record(void*, void*) { absent("a CUDA event"); }
void event_wait(void*, void*) { absent("a CUDA event"); }
void event_synchronize(void*) { absent("a CUDA event"); }
bool event_query(void*) { absent("a CUDA event"); }
double event_elapsed_ms(void*, void*) { absent("a CUDA event"); }
void check_device_index(int) { absent("CUDA device memory"); }
void set_device(int) { absent("a CUDA device"); }
void* device_malloc(int, std::size_t) { absent("CUDA device memory"); }
void device_free(int, void*) noexcept {}
void memcpy_async(void*, const void*, std::size_t, void*) { absent("a copy to or from a CUDA device"); }
void memset_async(void*, int, std::size_t, void*) { absent("a CUDA memset"); }
}  // namespace hzp::cuda_shim
