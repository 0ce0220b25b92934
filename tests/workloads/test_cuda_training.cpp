// GPU test: the `tiny` preset trained on the GPU by the `none` scheduler itself, given a CUDA stream and an
// allocator over CudaBacking as `hzpbench run --set backend=cuda` gives it (device buffers, every kernel's
// CUDA twin, on one stream), follows the CPU reference run of `none` on the same data and initial
// parameters. fp32: the first step's gradients agree to rel L2 1e-5 and the loss
// at steps 1 and 100 to 1e-4 relative; bf16-mixed: step-1 loss within 1e-2 relative, step 100 within
// 2%. The CPU run is the independent reference (OpenBLAS and the CPU kernels, another driver). The same with
// documents packed into the sequences (data.packing = documents): masked attention and per-document RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/data/packed_source.hpp"
#include "kernel_test_util.hpp"
#include "none_test_util.hpp"

namespace hzp::test {
namespace {

struct Curves {
  std::vector<double> cpu, gpu;
  std::vector<float> cpu_grads_step1, gpu_grads_step1;
};

/// `none` on the CPU and on the GPU, stepping through `data` (null: the preset's chain, as the runs are built).
Curves train_both(workloads::Precision precision, std::int64_t steps, bool packed = false) {
  NoneRun cpu("tiny");
  cpu.train.precision = precision;
  cpu.train.steps = steps;
  cpu.build();
  // Documents of mean 16 tokens in the preset's sequences: attention stays inside them and RoPE restarts
  // (the GPU's unfused kernels and rope_at against the CPU's tiled kernel and reference rotation).
  std::unique_ptr<workloads::PackedSource> documents;
  if (packed) {
    workloads::DocumentPacking p;
    p.kind = workloads::PackingKind::documents;
    p.mean_tokens = 16;
    p.sigma = 1.0;
    p.seed = 3;
    workloads::MarkovChainParams chain = cpu.chain;  // as NoneRun::build makes its source
    if (chain.vocab == 0) chain.vocab = cpu.model_config.vocab;
    documents = std::make_unique<workloads::PackedSource>(
        std::make_unique<workloads::MarkovSource>(chain, cpu.model_config.seq_len), p);
  }
  const workloads::DataSource* data = cpu.source.get();
  if (documents) data = documents.get();
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
    c.cpu.push_back(cpu.scheduler->step({s, data}).loss);
    const schedulers::StepStats st = dev->step({s, data});
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

TEST(CudaTraining, TinyFp32WithPackedDocumentsFollowsTheCpuRun) {
  const Curves c = train_both(workloads::Precision::fp32, 30, true);
  EXPECT_TRUE(rel_l2_close(c.gpu_grads_step1, c.cpu_grads_step1, 1e-5));
  EXPECT_LE(rel(c.gpu[0], c.cpu[0]), 1e-4) << "step 1: gpu " << c.gpu[0] << " cpu " << c.cpu[0];
  EXPECT_LE(rel(c.gpu[29], c.cpu[29]), 1e-4) << "step 30: gpu " << c.gpu[29] << " cpu " << c.cpu[29];
  // The documents matter: the same steps unpacked give another first loss.
  const Curves whole = train_both(workloads::Precision::fp32, 1);
  EXPECT_GT(std::abs(whole.cpu[0] - c.cpu[0]), 1e-6);
}

TEST(CudaTraining, TinyBf16MixedWithPackedDocumentsFollowsTheCpuRun) {
  const Curves c = train_both(workloads::Precision::bf16_mixed, 30, true);  // auto attention: unfused, masked
  EXPECT_LE(rel(c.gpu[0], c.cpu[0]), 1e-2) << "step 1: gpu " << c.gpu[0] << " cpu " << c.cpu[0];
  EXPECT_LE(rel(c.gpu[29], c.cpu[29]), 2e-2) << "step 30: gpu " << c.gpu[29] << " cpu " << c.cpu[29];
}

}  // namespace
}  // namespace hzp::test
