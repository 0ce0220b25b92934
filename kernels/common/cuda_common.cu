// Device queries cached per device for the CUDA kernels' grid sizing (cuda_common.cuh).
#include <array>
#include <atomic>

#include "common/cuda_common.cuh"

namespace hzp::kernels::cuda {

int sm_count(int device) {
  static std::array<std::atomic<int>, 64> cache{};
  HZP_CHECK(device >= 0 && device < 64, "sm_count: device index ", device, " out of range");
  int n = cache[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
  if (n == 0) {
    HZP_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cache[static_cast<std::size_t>(device)].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace hzp::kernels::cuda
