// The host side of a CUDA cross-entropy loss (private to hzp_kernels): the launchers return the loss sum by value,
// so they copy the per-token losses and the targets back, wait for the stream once, and sum the losses in token
// order in fp64, the sum the CPU launchers form from their stored losses. Shared by cross_entropy.cu and
// vocab_parallel.cu, which differ only in which targets count as valid.
#pragma once

#include <cstdint>
#include <vector>

#include "common/cuda_common.cuh"
#include "hzp/kernels/cross_entropy.hpp"

namespace hzp::kernels::cuda {

/// Blocks the host. losses: n fp32 on the device (after the kernel on s); targets: n int32 on the device.
/// n_valid counts the targets t for which counts(t) is true: the ones the kernel did not ignore.
template <typename Counts>
CrossEntropyResult sum_losses_on_host(const float* losses, const void* targets, std::int64_t n, StreamRef s,
                                      Counts&& counts) {
  std::vector<float> host_losses(static_cast<std::size_t>(n));
  std::vector<std::int32_t> host_targets(static_cast<std::size_t>(n));
  HZP_CUDA_CHECK(cudaMemcpyAsync(host_losses.data(), losses, host_losses.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, native(s)));
  HZP_CUDA_CHECK(cudaMemcpyAsync(host_targets.data(), targets, host_targets.size() * sizeof(std::int32_t),
                                 cudaMemcpyDeviceToHost, native(s)));
  HZP_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  CrossEntropyResult r;
  for (std::size_t i = 0; i < host_losses.size(); ++i) {
    r.loss_sum += static_cast<double>(host_losses[i]);
    r.n_valid += counts(host_targets[i]) ? 1 : 0;
  }
  return r;
}

}  // namespace hzp::kernels::cuda
