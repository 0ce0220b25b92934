// GPU test, under mpiexec: nd with pipeline stages (scheduler.pp = W, GPipe, 1F1B and interleaved 1F1B) on a CUDA
// compute stream, one GPU per rank (rank r takes cuda:(r mod visible GPUs)), the stages' boundary messages over NCCL
// (pipeline_links.hpp: one communicator per directed link, sends and receives on their own streams, each receive
// posted an action ahead of its reader into a slot the reader's context holds), the tied table's gradient
// summed over its two stages on the device. Each case follows the CPU run of `none` (the single-rank reference,
// another step loop, OpenBLAS and the CPU kernels) on `tiny` in fp32 for 20 steps: the loss and the gradient norm
// every step to 1e-4 relative, every step-0 gradient tensor a stage holds to rel L2 1e-5 (test_cuda_engines'
// bounds), each action timed on the device. Every test skips (exit 77) when fewer GPUs are visible than there are
// ranks, so a one-GPU machine skips it too; a phantom world on the GPU can run the same cases later, and one case
// is chosen from the command line with --gtest_filter (e.g. '*1f1b*'). Never run on a GPU yet (docs/cuda.md).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "hzp/collectives/mpi_bootstrap.hpp"
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/device.hpp"
#include "mpi_test.hpp"
#include "nd_test_util.hpp"

namespace hzp::test {
namespace {

using schedulers::PipelineScheduleKind;

struct GpuPipeCase {
  PipelineScheduleKind kind;
  int v;
  std::string name;
};

class CudaPipeline : public ::testing::TestWithParam<GpuPipeCase> {};

// Fewer visible GPUs than ranks: skipped on every rank (the count is the machine's, the same on each).
#define HZP_REQUIRE_A_GPU_PER_RANK()                                                                          \
  do {                                                                                                        \
    if (!cuda_compiled() || cuda_device_count() < world_size())                                               \
      GTEST_SKIP() << "needs a GPU per rank: " << world_size() << " ranks, "                                  \
                   << (cuda_compiled() ? cuda_device_count() : 0) << " visible GPUs";                         \
  } while (0)

TEST_P(CudaPipeline, StagesOnTheGpuFollowTheCpuNone) {
  HZP_REQUIRE_MIN_RANKS(2);
  HZP_REQUIRE_A_GPU_PER_RANK();
  const GpuPipeCase& c = GetParam();
  const int w = world_size(), rank = world_rank(), device = rank % cuda_device_count();
  const int layers = c.v * w > 4 ? c.v * w : 4;  // a block per chunk at least
  const auto shape = [layers](workloads::LlamaConfig& m) { m.layers = layers; };

  // The run on the GPU: nd over a NCCL world, stage `rank`, every buffer from an allocator over cudaMalloc.
  CudaBacking backing(device);
  CachingAllocator alloc(backing);
  Stream stream(Device::cuda(device));
  coll::MpiBootstrap boot(MPI_COMM_WORLD);
  coll::NcclCommConfig cfg;
  cfg.name = "world";
  cfg.device = device;
  cfg.timeout_s = 120;
  coll::NcclCommunicator world(boot, cfg);
  schedulers::SchedulerOptions o;
  o.pp = w;
  o.schedule = c.kind;
  o.virtual_stages = c.v;
  o.bucket_mb = 0.05;
  TinySetup setup(workloads::Precision::fp32, shape);
  const coll::Topology topology = coll::Topology::virtual_nodes(w, w, rank);
  schedulers::ProcessGroups groups(world, schedulers::scheduler_parallel_dims("nd", o, w), topology);
  const workloads::StageCut cut =
      schedulers::pipeline_layout_from(o, setup.model->layout().num_units()).cut(groups.pipeline()->rank());
  setup.model = workloads::make_llama(setup.model_config, workloads::Precision::fp32, {groups.tensor(), false}, cut,
                                      {groups.context()}, {groups.expert()});
  schedulers::SchedulerArgs a = setup.args();
  a.world = &world;
  a.topology = &topology;
  a.groups = &groups;
  a.options = o;
  a.allocator = &alloc;
  a.stream = stream.ref();
  const auto gpu = schedulers::make_scheduler("nd", a);

  TinySetup ref(workloads::Precision::fp32, shape);
  const auto none = schedulers::make_scheduler("none", ref.args());
  const std::string label = c.name + " pp=" + std::to_string(w);
  double worst = 0;
  for (int i = 0; i < 20; ++i) {
    const schedulers::StepStats want = none->step({i, ref.source.get()});
    const schedulers::StepStats got = gpu->step({i, setup.source.get()});
    worst = std::max(worst, rel_diff(got.loss, want.loss));
    EXPECT_LE(rel_diff(got.grad_norm, want.grad_norm), 1e-4) << label << " step " << i << " grad norm";
    EXPECT_TRUE(got.device_timed) << label;
    EXPECT_GT(got.forward_seconds, 0) << label;
    EXPECT_GT(got.backward_seconds, 0) << label;
    // Each stall is taken out of the phase that holds it (the receives' out of their actions): the step end keeps
    // a share of its own, never one it did not hold.
    EXPECT_TRUE(got.device_comm_timed) << label;
    EXPECT_GE(got.optimizer_seconds, 0) << label;
    if (i != 0) continue;
    // Step 0's gradient, tensor by tensor, for every tensor this stage holds (brought back to the host).
    GradCapture g_none;
    none->visit_state(g_none);
    const std::vector<float> mine = dynamic_cast<schedulers::DataParallelScheduler&>(*gpu).gather_gradient();
    const workloads::ParamLayout& layout = setup.model->layout();
    ASSERT_EQ(static_cast<std::int64_t>(mine.size()), layout.total_numel()) << label;
    for (int u = 0; u < layout.num_units(); ++u)
      for (int t = 0; t < static_cast<int>(layout.unit(u).tensors.size()); ++t) {
        const workloads::ParamTensor& pt = layout.unit(u).tensors[static_cast<std::size_t>(t)];
        const auto it = g_none.grads.find(pt.name);
        ASSERT_TRUE(it != g_none.grads.end()) << label << ": " << pt.name;
        EXPECT_LE(rel_l2(mine.data() + layout.tensor_offset(u, t), it->second.data(), pt.numel()), 1e-5)
            << label << ": step-0 gradient of " << pt.name;
      }
  }
  EXPECT_LE(worst, 1e-4) << label << ": largest relative loss difference over 20 steps";
}

INSTANTIATE_TEST_SUITE_P(Schedules, CudaPipeline,
                         ::testing::Values(GpuPipeCase{PipelineScheduleKind::gpipe, 1, "gpipe"},
                                           GpuPipeCase{PipelineScheduleKind::one_f_one_b, 1, "1f1b"},
                                           GpuPipeCase{PipelineScheduleKind::interleaved, 2, "interleaved"}),
                         [](const ::testing::TestParamInfo<GpuPipeCase>& i) { return i.param.name; });

}  // namespace
}  // namespace hzp::test
