// GPU test: the `tiny` preset trained on the GPU (device buffers, every kernel's CUDA twin, on one
// stream: support/device_training.hpp) follows the CPU reference run of the `none` scheduler on the
// same data and initial parameters. fp32: the first step's gradients agree to rel L2 1e-5 and the loss
// at steps 1 and 100 to 1e-4 relative; bf16-mixed: step-1 loss within 1e-2 relative, step 100 within
// 2%. The CPU run is the independent reference (OpenBLAS and the CPU kernels, another driver).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "device_training.hpp"
#include "gpu_test_util.hpp"
#include "kernel_test_util.hpp"
#include "none_test_util.hpp"

namespace hzp::test {
namespace {

struct Curves {
  std::vector<double> cpu, gpu;
  std::vector<float> cpu_grads_step1, gpu_grads_step1;
};

Curves train_both(workloads::Precision precision, std::int64_t steps) {
  NoneRun cpu("tiny");
  cpu.train.precision = precision;
  cpu.train.steps = steps;
  cpu.build();
  Gpu gpu;
  DeviceTraining dev(*cpu.model, cpu.train, gpu.allocator(), gpu.stream());
  Curves c;
  for (std::int64_t s = 0; s < steps; ++s) {
    c.cpu.push_back(cpu.step().loss);
    c.gpu.push_back(dev.step(*cpu.source, s));
    if (s == 0) {
      const ConstTensorView g = cpu.scheduler->grads();
      c.cpu_grads_step1.assign(g.as<float>(), g.as<float>() + g.numel());
      c.gpu_grads_step1 = gpu.download<float>(dev.grads_view());
    }
  }
  return c;
}

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(CudaTraining, TinyFp32FollowsTheCpuRun) {
  const Curves c = train_both(workloads::Precision::fp32, 100);
  EXPECT_TRUE(rel_l2_close(c.gpu_grads_step1, c.cpu_grads_step1, 1e-5));
  EXPECT_LE(rel(c.gpu[0], c.cpu[0]), 1e-4) << "step 1: gpu " << c.gpu[0] << " cpu " << c.cpu[0];
  EXPECT_LE(rel(c.gpu[99], c.cpu[99]), 1e-4) << "step 100: gpu " << c.gpu[99] << " cpu " << c.cpu[99];
  EXPECT_LT(c.gpu[99], 0.8 * c.gpu[0]) << "the GPU run does not learn";
}

TEST(CudaTraining, TinyBf16MixedFollowsTheCpuRun) {
  const Curves c = train_both(workloads::Precision::bf16_mixed, 100);
  EXPECT_LE(rel(c.gpu[0], c.cpu[0]), 1e-2) << "step 1: gpu " << c.gpu[0] << " cpu " << c.cpu[0];
  EXPECT_LE(rel(c.gpu[99], c.cpu[99]), 2e-2) << "step 100: gpu " << c.gpu[99] << " cpu " << c.cpu[99];
  EXPECT_LT(c.gpu[99], 0.8 * c.gpu[0]) << "the GPU run does not learn";
}

}  // namespace
}  // namespace hzp::test
