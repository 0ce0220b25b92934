// GPU test: checkpoints of device state (docs/checkpoints.md, "On a GPU"). `none` and the data-parallel engines
// (ddp, zero1, zero2, zero3, hsdp, asynchzp with its background threads' streams) train `tiny` on one GPU, with
// their buffers from an allocator over CudaBacking and every kernel on one CUDA stream as `hzpbench run --set backend=cuda` gives them (the engines over a one-rank NCCL
// group), fp32 and bf16-mixed:
//  - the round trip is exact: N/2 steps, a checkpoint, a fresh scheduler restored from it and saved again at once:
//    the two files' master, m and v arrays are bitwise equal (the device buffers went down, up and down again);
//  - the continuation: the restored scheduler's N/2 more steps against N steps uninterrupted, losses and the final
//    master and working parameters bitwise equal. Bitwise only where the device reproduces an uninterrupted run
//    bitwise (a second uninterrupted run tells: the embedding's backward adds with atomics, whose order the GPU
//    may change from run to run); otherwise within 1e-5 (fp32) or 1e-3 (bf16-mixed) relative loss, said in the
//    output. Exit 77 (CTest's skip) without a CUDA device, as every GPU test.
// Run on a GPU machine: build/tests/test_cuda_checkpoint (about 150 s on one H100; --gtest_filter=*none* for one).
#include <mpi.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "gpu_test_util.hpp"
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/harness/checkpoint_io.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "none_test_util.hpp"

namespace hzp::test {
namespace {

namespace fs = std::filesystem;
using workloads::Precision;

constexpr std::int64_t kSteps = 8;  // N; the checkpoint is after step N/2 - 1

// The checkpoint file is written through MPI-IO: a one-process MPI job (MPI_Init as a singleton).
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int done = 0;
    MPI_Initialized(&done);
    if (!done) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    }
  }
  void TearDown() override {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }
};
[[maybe_unused]] const auto* const kMpi = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

struct Outcome {
  std::vector<double> losses;
  std::vector<float> master, working;
};

struct Case {
  std::string engine;
  Precision precision;
};

// One scheduler on the GPU over a host-built model and data (the NoneRun's), as the run builds it.
class GpuTrainer {
 public:
  GpuTrainer(const NoneRun& host, const Case& c) : host_(host) {
    schedulers::SchedulerArgs args;
    args.model = host.model.get();
    args.train = host.train;
    args.allocator = &gpu_.allocator();
    args.stream = gpu_.stream();
    if (c.engine != "none") {
      coll::NcclCommConfig cfg;
      cfg.name = "world";
      cfg.device = 0;
      world_ = std::make_unique<coll::NcclCommunicator>(solo_, cfg);
      args.world = world_.get();
      args.options.group_size = 1;  // hsdp: shards of one rank, replicated
    }
    scheduler_ = schedulers::make_scheduler(c.engine, args);
  }
  void steps(std::int64_t from, std::int64_t to, Outcome& o) {
    for (std::int64_t s = from; s < to; ++s) o.losses.push_back(scheduler_->step({s, host_.source.get()}).loss);
  }
  void save(const fs::path& path, std::int64_t step) {
    save_checkpoint(MPI_COMM_SELF, path, *scheduler_, *host_.model, host_.train, step);
  }
  std::int64_t resume(const fs::path& path) {
    return resume_checkpoint(MPI_COMM_SELF, path, *scheduler_, *host_.model, host_.train);
  }
  // The final master and working parameters, on the host, as fp32 [N].
  void final_params(Outcome& o) {
    if (auto* dp = dynamic_cast<schedulers::DataParallelScheduler*>(scheduler_.get())) {
      o.master = dp->gather_master_params();
      o.working = dp->gather_working_params();
      return;
    }
    auto& none = dynamic_cast<schedulers::NoneScheduler&>(*scheduler_);
    o.master = widened(none.master_params());
    o.working = widened(none.working_params());
  }

 private:
  std::vector<float> widened(ConstTensorView v) {
    if (v.dtype() == DType::f32) return gpu_.download<float>(v);
    DeviceTensor f = gpu_.empty(Shape{v.numel()}, DType::f32);
    kernels::cast(f.view, v, gpu_.stream());
    return gpu_.download<float>(f.view);
  }

  const NoneRun& host_;
  Gpu gpu_;
  coll::SelfBootstrap solo_;
  std::unique_ptr<coll::NcclCommunicator> world_;
  std::unique_ptr<schedulers::Scheduler> scheduler_;
};

// A folder of this process's, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/hzp_cuda_ckpt_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Array `component` of a checkpoint, whole, as its raw 32-bit words.
std::vector<std::uint32_t> stored(const fs::path& file, const NoneRun& host, const char* component) {
  const workloads::ParamLayout& layout = host.model->layout();
  harness::CheckpointReader r(MPI_COMM_SELF, file, harness::checkpoint_tensor_table(layout), host.model->describe());
  const std::int64_t n = layout.total_numel();
  std::vector<std::uint32_t> out(static_cast<std::size_t>(n));
  const harness::FlatRun all{0, n};
  r.read(component, DType::f32, std::span<const harness::FlatRun>(&all, 1), out.data());
  return out;
}

double worst_relative(const std::vector<double>& got, const std::vector<double>& want, std::size_t from) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i + from]) / std::abs(want[i + from]));
  return worst;
}

bool bitwise(const Outcome& a, const Outcome& b, std::size_t from = 0) {
  if (a.losses.size() + from != b.losses.size() || a.master.size() != b.master.size() ||
      a.working.size() != b.working.size())
    return false;
  return std::memcmp(a.losses.data(), b.losses.data() + from, a.losses.size() * sizeof(double)) == 0 &&
         std::memcmp(a.master.data(), b.master.data(), a.master.size() * sizeof(float)) == 0 &&
         std::memcmp(a.working.data(), b.working.data(), a.working.size() * sizeof(float)) == 0;
}

class CudaCheckpoint : public ::testing::TestWithParam<Case> {};

TEST_P(CudaCheckpoint, ResumeContinuesTheUninterruptedRun) {
  const Case& c = GetParam();
  NoneRun host("tiny");  // the model, data and configuration every run below shares (host objects)
  host.train.precision = c.precision;
  host.train.steps = kSteps;
  host.train.warmup_steps = 2;
  host.build();
  auto uninterrupted = [&] {
    GpuTrainer t(host, c);
    Outcome o;
    t.steps(0, kSteps, o);
    t.final_params(o);
    return o;
  };
  const Outcome want = uninterrupted();
  const bool reproducible = bitwise(uninterrupted(), want);

  TempDir dir;
  const fs::path first = dir.path / "first.ckpt.h5", again = dir.path / "again.ckpt.h5";
  {
    GpuTrainer a(host, c);
    Outcome ignored;
    a.steps(0, kSteps / 2, ignored);
    a.save(first, kSteps / 2 - 1);
  }
  GpuTrainer b(host, c);
  ASSERT_EQ(b.resume(first), kSteps / 2);
  // Saved again before any step: the device state went down, up and down again unchanged.
  b.save(again, kSteps / 2 - 1);
  for (const char* component : {"master", "m", "v"})
    EXPECT_EQ(stored(again, host, component), stored(first, host, component))
        << c.engine << ": array " << component << " changed through a restore and a save";
  Outcome got;
  b.steps(kSteps / 2, kSteps, got);
  b.final_params(got);

  ASSERT_EQ(got.losses.size(), static_cast<std::size_t>(kSteps / 2));
  if (reproducible) {
    EXPECT_TRUE(bitwise(got, want, kSteps / 2)) << c.engine << ": the resumed run is not bitwise the uninterrupted one "
                                                << "(which this device reproduces bitwise)";
  } else {
    const double tol = c.precision == Precision::fp32 ? 1e-5 : 1e-3;
    const double worst = worst_relative(got.losses, want.losses, kSteps / 2);
    std::printf("note: %s: two uninterrupted runs differ on this device (atomics in the backward), so the "
                "continuation is compared to %.0e relative loss: largest %.2e\n", c.engine.c_str(), tol, worst);
    EXPECT_LE(worst, tol) << c.engine;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (const char* e : {"none", "ddp", "zero1", "zero2", "zero3", "hsdp", "asynchzp"}) out.push_back({e, p});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Engines, CudaCheckpoint, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.engine + (info.param.precision == Precision::fp32 ? "_fp32" : "_bf16");
});

}  // namespace
}  // namespace hzp::test
