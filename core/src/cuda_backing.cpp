// CudaBacking and the host/device copy helpers over the private CUDA bridge (cuda_shim.hpp), so this
// file compiles in every build; without CUDA the bridge throws UnsupportedError.
#include "hzp/core/cuda_backing.hpp"

#include <cstring>

#include "cuda_shim.hpp"
#include "hzp/core/error.hpp"

namespace hzp {

CudaBacking::CudaBacking(int device) : device_(device) {
  HZP_CHECK(device >= 0, "CudaBacking: device index ", device, " is negative");
  cuda_shim::check_device_index(device);
}

void* CudaBacking::allocate(std::size_t bytes) {
  HZP_CHECK(bytes > 0, "cuda backing asked for a zero-byte segment");
  return cuda_shim::device_malloc(device_, bytes);
}

void CudaBacking::deallocate(void* ptr, std::size_t) noexcept { cuda_shim::device_free(device_, ptr); }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes, StreamRef s) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  HZP_CHECK(s.device().is_cuda(), "copy_bytes from ", to_string(src_device), " to ", to_string(dst_device),
            " needs a CUDA stream, got one on ", to_string(s.device()));
  cuda_shim::memcpy_async(dst, src, bytes, s.native());
}

void zero_bytes(void* dst, std::size_t bytes, StreamRef s) {
  if (bytes == 0) return;
  if (s.device().is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  cuda_shim::memset_async(dst, 0, bytes, s.native());
}

}  // namespace hzp
