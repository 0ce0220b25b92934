// GPU test: the `tiny` preset trained on the GPU by the `none` scheduler itself, given a CUDA stream and an
// allocator over CudaBacking as `hzpbench run --set backend=cuda` gives it (device buffers, every kernel's
// CUDA twin, on one stream), follows the CPU reference run of `none` on the same data and initial
// parameters. fp32: the first step's gradients agree to rel L2 1e-5 and the loss
// at steps 1 and 100 to 1e-4 relative; bf16-mixed: step-1 loss within 1e-2 relative, step 100 within
// 2%. The CPU run is the independent reference (OpenBLAS and the CPU kernels, another driver).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/schedulers/scheduler.hpp"
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
  schedulers::SchedulerArgs args;
  args.model = cpu.model.get();
  args.train = cpu.train;
  args.allocator = &gpu.allocator();
  args.stream = gpu.stream();
  const auto dev = schedulers::make_scheduler("none", args);
  auto& none = dynamic_cast<schedulers::NoneScheduler&>(*dev);
  // Every persistent buffer is device memory from the given allocator, under the host run's tags.
  EXPECT_TRUE(none.grads().device().is_cuda());
  EXPECT_TRUE(none.working_params().device().is_cuda());
  EXPECT_GE(gpu.allocator().stats().tag(AllocationTag::grad).requested_bytes, none.grads().bytes());
  EXPECT_GE(gpu.allocator().stats().tag(AllocationTag::adam_m).requested_bytes, none.grads().bytes());
  Curves c;
  for (std::int64_t s = 0; s < steps; ++s) {
    c.cpu.push_back(cpu.step().loss);
    const schedulers::StepStats st = dev->step({s, cpu.source.get()});
    c.gpu.push_back(st.loss);
    EXPECT_TRUE(st.device_timed);
    EXPECT_GT(st.forward_seconds, 0);
    EXPECT_GT(st.backward_seconds, 0);
    EXPECT_GT(st.optimizer_seconds, 0);
    if (s == 0) {
      const ConstTensorView g = cpu.scheduler->grads();
      c.cpu_grads_step1.assign(g.as<float>(), g.as<float>() + g.numel());
      c.gpu_grads_step1 = gpu.download<float>(none.grads());
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
