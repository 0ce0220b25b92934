// Resume through checkpoints (checkpoint_io.hpp, docs/checkpoints.md), in-process under mpiexec at 2 and 4 ranks on
// the `tiny` preset. Resume equality: N steps uninterrupted against N/2 steps, a checkpoint, a fresh model and
// scheduler restored from it and N/2 more: every loss and the final master and working parameters bitwise equal,
// for none, zero3, hsdp and asynchzp (async) (and zero1, zero2, ddp), fp32 and bf16-mixed, and for tiny-moe (its
// balancing bias restored). Resharding in deterministic mode, where every
// layout computes the bits of `none` (docs/deterministic.md): a checkpoint of zero3 over every rank continued by
// asynchzp over half of them, and one of ddp over half continued by hsdp over all, each bitwise equal to `none`
// run uninterrupted (the uninterrupted run of any layout). Refusals: changed bytes, a truncated file, another
// precision.
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint_test_util.hpp"
#include "data_parallel_test_util.hpp"
#include "hzp/core/error.hpp"
#include "hzp/harness/checkpoint_io.hpp"
#include "hzp/kernels/cast.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {

namespace fs = std::filesystem;
using workloads::Precision;

constexpr std::int64_t kSteps = 6;  // N; the checkpoint is after step N/2 - 1

// A folder every rank of `comm` sees (its rank 0 makes it), removed at the end.
struct SharedDir {
  fs::path path;
  MPI_Comm comm;
  explicit SharedDir(MPI_Comm c = MPI_COMM_WORLD) : comm(c) {
    int r = 0;
    MPI_Comm_rank(comm, &r);
    char buf[64] = {};
    if (r == 0) {
      char tmpl[] = "/tmp/hzp_resume_XXXXXX";
      std::strncpy(buf, mkdtemp(tmpl), sizeof buf - 1);
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, comm);
    path = buf;
  }
  ~SharedDir() {
    MPI_Barrier(comm);
    int r = 0;
    MPI_Comm_rank(comm, &r);
    if (r == 0) fs::remove_all(path);
  }
};

// What a run ends with: every step's loss and the final parameters, gathered flat [N].
struct Outcome {
  std::vector<double> losses;
  std::vector<float> master, working;
};

std::vector<float> widened(ConstTensorView v) {
  std::vector<float> out(static_cast<std::size_t>(v.numel()));
  if (v.dtype() == DType::f32) std::memcpy(out.data(), v.data(), v.bytes());
  else kernels::cast(TensorView(out.data(), Shape{v.numel()}, DType::f32), v, StreamRef::host());
  return out;
}

void final_params(schedulers::Scheduler& s, Outcome& o) {
  if (auto* dp = dynamic_cast<schedulers::DataParallelScheduler*>(&s)) {
    o.master = dp->gather_master_params();
    o.working = dp->gather_working_params();
  } else {
    auto& n = dynamic_cast<schedulers::NoneScheduler&>(s);
    o.master = widened(n.master_params());
    o.working = widened(n.working_params());
  }
}

// One layout of one run: a scheduler over the ranks of `comm` (MPI_COMM_NULL: `none`, alone).
struct Layout {
  std::string scheduler;
  schedulers::SchedulerOptions options;
};

class Trainer {
 public:
  /// `moe`: the tiny-moe preset's model (routed experts with the balancing bias) instead of tiny's.
  Trainer(const Layout& l, Precision p, bool deterministic, MPI_Comm comm, bool moe = false)
      : setup_(p, moe ? [](workloads::LlamaConfig& c) { c = workloads::model_preset("tiny-moe").model; }
                      : std::function<void(workloads::LlamaConfig&)>{}),
        comm_(comm) {
    setup_.train.deterministic = deterministic;
    schedulers::SchedulerArgs a = setup_.args();
    a.options = l.options;
    // Deterministic mode: a coarse step-0 scale (2^10), so that the later steps' exponents, set from the previous
    // step's maxima, give other bits than step 0's would: a resume that lost the stored scales shows.
    a.fixed_point.step0_exponent = 10;
    if (comm != MPI_COMM_NULL) {
      int size = 0, rank = 0;
      MPI_Comm_size(comm, &size);
      MPI_Comm_rank(comm, &rank);
      world_ = coll::make_mpi_world(coll::Topology::virtual_nodes(size, size, rank), {}, comm, "world");
      a.world = world_.get();
    }
    scheduler_ = schedulers::make_scheduler(l.scheduler, a);
  }
  MPI_Comm io_comm() const { return comm_ == MPI_COMM_NULL ? MPI_COMM_SELF : comm_; }
  void steps(std::int64_t from, std::int64_t to, Outcome& o) {
    for (std::int64_t s = from; s < to; ++s) o.losses.push_back(scheduler_->step({s, setup_.source.get()}).loss);
  }
  void save(const fs::path& path, std::int64_t step) {
    save_checkpoint(io_comm(), path, *scheduler_, *setup_.model, setup_.train, step);
  }
  std::int64_t resume(const fs::path& path) {
    return resume_checkpoint(io_comm(), path, *scheduler_, *setup_.model, setup_.train);
  }
  schedulers::Scheduler& scheduler() { return *scheduler_; }

 private:
  TinySetup setup_;
  MPI_Comm comm_;
  std::unique_ptr<coll::MpiCommunicator> world_;
  std::unique_ptr<schedulers::Scheduler> scheduler_;
};

Outcome uninterrupted(const Layout& l, Precision p, bool det, MPI_Comm comm, bool moe = false) {
  Trainer t(l, p, det, comm, moe);
  Outcome o;
  t.steps(0, kSteps, o);
  final_params(t.scheduler(), o);
  return o;
}

void expect_bitwise(const Outcome& got, const Outcome& want, std::int64_t from, const std::string& what) {
  ASSERT_EQ(got.losses.size() + static_cast<std::size_t>(from), want.losses.size()) << what;
  for (std::size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&got.losses[i], &want.losses[i + static_cast<std::size_t>(from)], sizeof(double)), 0)
        << what << ": loss of step " << i + static_cast<std::size_t>(from) << " " << got.losses[i] << " vs "
        << want.losses[i + static_cast<std::size_t>(from)];
  ASSERT_EQ(got.master.size(), want.master.size()) << what;
  EXPECT_EQ(std::memcmp(got.master.data(), want.master.data(), got.master.size() * sizeof(float)), 0)
      << what << ": master parameters differ";
  EXPECT_EQ(std::memcmp(got.working.data(), want.working.data(), got.working.size() * sizeof(float)), 0)
      << what << ": working parameters differ";
}

// Stops after N/2 steps, checkpoints, and continues in `to` (a fresh model and scheduler) from the file.
Outcome interrupted(const Layout& from, MPI_Comm from_comm, const Layout& to, MPI_Comm to_comm, Precision p, bool det,
                    const fs::path& file, bool moe = false) {
  {
    Trainer a(from, p, det, from_comm, moe);
    Outcome ignored;
    a.steps(0, kSteps / 2, ignored);
    a.save(file, kSteps / 2 - 1);
  }
  Trainer b(to, p, det, to_comm, moe);
  Outcome o;
  const std::int64_t next = b.resume(file);
  EXPECT_EQ(next, kSteps / 2);
  b.steps(next, kSteps, o);
  final_params(b.scheduler(), o);
  return o;
}

std::vector<Layout> resumed_layouts(int w) {
  schedulers::SchedulerOptions hsdp;
  hsdp.group_size = w / 2;
  schedulers::SchedulerOptions async;
  async.z1 = w;
  async.z2 = w / 2;
  async.z3 = std::max(1, w / 4);
  async.async = true;
  // zero1/zero2 rebuild their full parameter copies by gathers on load, ddp reads the whole model on every rank.
  return {{"zero3", {}}, {"hsdp", hsdp}, {"asynchzp", async}, {"zero1", {}}, {"zero2", {}}, {"ddp", {}}};
}

class Resume : public ::testing::TestWithParam<Precision> {};

TEST_P(Resume, NoneContinuesBitwise) {
  // `none` is one rank: every rank runs it alone, with its own file.
  SharedDir dir;
  const Layout none{"none", {}};
  const fs::path file = dir.path / ("none_r" + std::to_string(world_rank()) + ".ckpt.h5");
  const Outcome want = uninterrupted(none, GetParam(), false, MPI_COMM_NULL);
  const Outcome got = interrupted(none, MPI_COMM_NULL, none, MPI_COMM_NULL, GetParam(), false, file);
  expect_bitwise(got, want, kSteps / 2, "none");
}

TEST_P(Resume, ShardedSchedulersContinueBitwise) {
  SharedDir dir;
  for (const Layout& l : resumed_layouts(world_size())) {
    const fs::path file = dir.path / (l.scheduler + ".ckpt.h5");
    const Outcome want = uninterrupted(l, GetParam(), false, MPI_COMM_WORLD);
    const Outcome got = interrupted(l, MPI_COMM_WORLD, l, MPI_COMM_WORLD, GetParam(), false, file);
    expect_bitwise(got, want, kSteps / 2, l.scheduler + " at " + std::to_string(world_size()) + " ranks");
  }
}

// tiny-moe: the balancing bias is state beside the parameters (Workload::checkpoint_state). Without it restored the
// resumed run routes tokens as if the bias were zero, and its losses leave the uninterrupted run's.
TEST(ResumeMoe, BalancingBiasContinuesBitwise) {
  SharedDir dir;
  const Layout zero3{"zero3", {}};
  const fs::path file = dir.path / "moe.ckpt.h5";
  const Outcome want = uninterrupted(zero3, Precision::fp32, false, MPI_COMM_WORLD, true);
  const Outcome got = interrupted(zero3, MPI_COMM_WORLD, zero3, MPI_COMM_WORLD, Precision::fp32, false, file, true);
  expect_bitwise(got, want, kSteps / 2, "tiny-moe zero3");
}

INSTANTIATE_TEST_SUITE_P(Precisions, Resume, ::testing::Values(Precision::fp32, Precision::bf16_mixed),
                         [](const auto& i) { return i.param == Precision::fp32 ? std::string("fp32") : std::string("bf16"); });

// The first half of the world (ranks 0 .. W/2 - 1) as a communicator; MPI_COMM_NULL on the others.
struct HalfWorld {
  MPI_Comm comm = MPI_COMM_NULL;
  HalfWorld() {
    const bool in = world_rank() < world_size() / 2;
    MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  }
  ~HalfWorld() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

class Reshard : public ::testing::TestWithParam<Precision> {};

TEST_P(Reshard, Zero3OverAllToAsynchzpOverHalfIsNoneBitwise) {
  const int w = world_size();
  SharedDir dir;
  HalfWorld half;
  const fs::path file = dir.path / "zero3.ckpt.h5";
  // The reference: `none` uninterrupted on each rank (deterministic mode: every layout's bits).
  const Outcome want = uninterrupted({"none", {}}, GetParam(), true, MPI_COMM_NULL);
  {
    Trainer a({"zero3", {}}, GetParam(), true, MPI_COMM_WORLD);
    Outcome ignored;
    a.steps(0, kSteps / 2, ignored);
    a.save(file, kSteps / 2 - 1);
  }
  if (half.comm == MPI_COMM_NULL) return;  // the other half has nothing to continue
  schedulers::SchedulerOptions async;
  async.z1 = w / 2;
  async.z2 = std::max(1, w / 4);
  async.z3 = 1;
  async.async = true;
  Trainer b({"asynchzp", async}, GetParam(), true, half.comm);
  Outcome got;
  ASSERT_EQ(b.resume(file), kSteps / 2);
  b.steps(kSteps / 2, kSteps, got);
  final_params(b.scheduler(), got);
  expect_bitwise(got, want, kSteps / 2, "zero3@" + std::to_string(w) + " -> asynchzp@" + std::to_string(w / 2));
}

TEST_P(Reshard, DdpOverHalfToHsdpOverAllIsNoneBitwise) {
  const int w = world_size();
  SharedDir dir;
  HalfWorld half;
  const fs::path file = dir.path / "ddp.ckpt.h5";
  const Outcome want = uninterrupted({"none", {}}, GetParam(), true, MPI_COMM_NULL);
  if (half.comm != MPI_COMM_NULL) {
    Trainer a({"ddp", {}}, GetParam(), true, half.comm);
    Outcome ignored;
    a.steps(0, kSteps / 2, ignored);
    a.save(file, kSteps / 2 - 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the file is whole before the other half opens it
  schedulers::SchedulerOptions hsdp;
  hsdp.group_size = std::max(1, w / 2);
  Trainer b({"hsdp", hsdp}, GetParam(), true, MPI_COMM_WORLD);
  Outcome got;
  ASSERT_EQ(b.resume(file), kSteps / 2);
  b.steps(kSteps / 2, kSteps, got);
  final_params(b.scheduler(), got);
  expect_bitwise(got, want, kSteps / 2, "ddp@" + std::to_string(w / 2) + " -> hsdp@" + std::to_string(w));
}

INSTANTIATE_TEST_SUITE_P(Precisions, Reshard, ::testing::Values(Precision::fp32, Precision::bf16_mixed),
                         [](const auto& i) { return i.param == Precision::fp32 ? std::string("fp32") : std::string("bf16"); });

// Changed bytes, a cut file and another precision: refused on every rank, naming the file.
TEST(ResumeRefusals, CorruptTruncatedAndOtherPrecision) {
  SharedDir dir;
  const fs::path file = dir.path / "z.ckpt.h5";
  {
    Trainer a({"zero3", {}}, Precision::fp32, false, MPI_COMM_WORLD);
    Outcome ignored;
    a.steps(0, 1, ignored);
    a.save(file, 0);
  }
  const auto expect_refused = [&](const fs::path& p, Precision prec, ErrorCode code, const std::string& needle) {
    Trainer b({"zero3", {}}, prec, false, MPI_COMM_WORLD);
    try {
      b.resume(p);
      ADD_FAILURE() << p << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
      EXPECT_NE(e.message().find(p.filename().string()), std::string::npos) << e.what();
    }
  };
  expect_refused(file, Precision::bf16_mixed, ErrorCode::config, "train.precision = fp32");

  const fs::path flipped = dir.path / "flipped.ckpt.h5", cut = dir.path / "cut.ckpt.h5";
  if (world_rank() == 0) {
    fs::copy_file(file, flipped);
    fs::copy_file(file, cut);
    const auto size = fs::file_size(file);
    // A byte inside the data (the arrays fill most of the file: its last quarter is array bytes).
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size * 3 / 4));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(size * 3 / 4));
    f.write(&c, 1);
    f.close();
    fs::resize_file(cut, size / 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_refused(flipped, Precision::fp32, ErrorCode::data, "checkpoint");
  expect_refused(cut, Precision::fp32, ErrorCode::data, "checkpoint");
}

}  // namespace
}  // namespace hzp::test
