// main() of every GPU test binary: runs GoogleTest when a CUDA device is usable, and otherwise exits 77,
// which hzp_add_gpu_test registers as CTest's skip code, so a machine without a GPU (CI) shows the test
// as skipped, never as passed or failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "hzp/core/device.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!hzp::cuda_compiled() || hzp::cuda_device_count() == 0) {
    std::printf("no usable CUDA device (CUDA compiled in: %s): GPU test skipped\n",
                hzp::cuda_compiled() ? "yes" : "no");
    return 77;
  }
  return RUN_ALL_TESTS();
}
