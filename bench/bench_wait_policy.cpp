// Wait policies of the MPI backend (collectives.wait_policy: yield, backoff, mixed) on small
// all_gathers, inline (the calling thread waits) or, with --background, from a background thread
// on a duplicated communicator while the main thread computes (AsyncHZP's prefetch pattern);
// --background-idle: the main thread sleeps meanwhile instead.
// The best policy differs between the two (docs/environment.md, MPI on oversubscribed cores);
// docs/collectives.md records the numbers.
// MPI-aware main: rank 0 reports, the others use a null reporter; each iteration's
// time is the MAX over ranks, so every rank runs identical iteration counts.
#include <mpi.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology_mpi.hpp"
#include "hzp/core/clock.hpp"

namespace {

using hzp::coll::Communicator;
using hzp::coll::MpiCommConfig;
using hzp::coll::WaitPolicy;

MPI_Comm g_stats = MPI_COMM_NULL;  // the benchmark's own reductions, apart from the measured comms
bool g_background = false;
bool g_main_computes = true;  // --background: true; --background-idle: false

// MAX over ranks with a test + yield wait: a blocking MPI call busy-polls when ranks oversubscribe
// the cores (docs/environment.md, MPI on oversubscribed cores) and would slow the very peers being
// measured.
double max_over_ranks(double v) {
  double out = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, g_stats, &req);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) sched_yield();
  }
  return out;
}

/// Runs all_gathers on its own duplicated communicator in a thread, one per request from the
/// main thread, which computes meanwhile (checking a flag between small chunks of arithmetic).
class BackgroundGatherer {
 public:
  explicit BackgroundGatherer(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)), thread_([this] { loop(); }) {}
  ~BackgroundGatherer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  /// One all_gather in the background; returns its duration as seen by the background thread.
  double gather(hzp::ConstTensorView in, hzp::TensorView out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_ = in;
      out_ = out;
      done_.store(false, std::memory_order_relaxed);
      pending_ = true;
    }
    cv_.notify_one();
    if (g_main_computes) {
      volatile double x = 0;
      while (!done_.load(std::memory_order_acquire))
        for (int i = 0; i < 2000; ++i) x = x + 1e-9 * i;  // the compute thread's work
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      idle_cv_.wait(lock, [this] { return done_.load(std::memory_order_acquire); });
    }
    return seconds_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return pending_ || stop_; });
      if (stop_) return;
      pending_ = false;
      lock.unlock();  // the main thread only spins on done_ meanwhile
      const double t0 = hzp::wall_seconds();
      comm_->all_gather(in_, out_, hzp::StreamRef::host());
      seconds_ = hzp::wall_seconds() - t0;
      lock.lock();
      done_.store(true, std::memory_order_release);
      idle_cv_.notify_one();
    }
  }

  std::unique_ptr<Communicator> comm_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  bool pending_ = false, stop_ = false;
  std::atomic<bool> done_{false};
  hzp::ConstTensorView in_;
  hzp::TensorView out_;
  double seconds_ = 0;
  std::thread thread_;  // last: started once the members above exist
};

struct PolicySetup {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<BackgroundGatherer> background;
};
std::vector<PolicySetup> g_setups;  // indexed by WaitPolicy

void BM_AllGather(benchmark::State& state, WaitPolicy policy) {
  PolicySetup& setup = g_setups[static_cast<std::size_t>(policy)];
  Communicator& world = *setup.world;
  const std::int64_t bytes = state.range(0);
  const std::int64_t n = std::max<std::int64_t>(1, bytes / 4);
  std::vector<float> in(static_cast<std::size_t>(n), static_cast<float>(world.rank()));
  std::vector<float> out(static_cast<std::size_t>(n * world.size()));
  const hzp::ConstTensorView vin(in.data(), hzp::Shape{n}, hzp::DType::f32);
  const hzp::TensorView vout(out.data(), hzp::Shape{n * world.size()}, hzp::DType::f32);
  for (auto _ : state) {
    double dt = 0;
    if (setup.background) {
      dt = setup.background->gather(vin, vout);
    } else {
      const double t0 = hzp::wall_seconds();
      world.all_gather(vin, vout, hzp::StreamRef::host());
      dt = hzp::wall_seconds() - t0;
    }
    state.SetIterationTime(max_over_ranks(dt));
  }
  // #wrong, nccl-tests style: the last iteration's result checked.
  std::int64_t wrong = 0;
  for (int q = 0; q < world.size(); ++q)
    for (std::int64_t i = 0; i < n; ++i) wrong += out[static_cast<std::size_t>(q * n + i)] != static_cast<float>(q);
  state.counters["wrong"] = static_cast<double>(wrong);
  state.counters["ranks"] = world.size();
  state.SetLabel(!g_background ? "inline" : g_main_computes ? "background, main computes" : "background, main idle");
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hzp::set_process_rank(rank);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) std::fprintf(stderr, "MPI_THREAD_MULTIPLE not provided\n");
    MPI_Finalize();
    return 1;
  }
  // Our flag, removed before Google Benchmark parses the rest.
  bool has_out = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--background") == 0 || std::strcmp(argv[i], "--background-idle") == 0) {
      g_background = true;
      g_main_computes = std::strcmp(argv[i], "--background") == 0;
      continue;
    }
    if (std::strncmp(argv[i], "--benchmark_out=", 16) == 0) has_out = true;
    args.push_back(argv[i]);
  }
  int bargc = static_cast<int>(args.size());
  benchmark::Initialize(&bargc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, args.data())) {
    MPI_Finalize();
    return 1;
  }

  int rc = 0;
  try {
    MPI_Comm_dup(MPI_COMM_WORLD, &g_stats);
    const hzp::coll::Topology topo = hzp::coll::discover_topology(MPI_COMM_WORLD, 0);
    for (WaitPolicy policy : {WaitPolicy::yield, WaitPolicy::backoff, WaitPolicy::mixed}) {
      MpiCommConfig c;
      c.wait_policy = policy;
      PolicySetup s;
      s.world = hzp::coll::make_mpi_world(topo, c);
      if (g_background) s.background = std::make_unique<BackgroundGatherer>(s.world->duplicate("background"));
      g_setups.push_back(std::move(s));
      const std::string name = std::string("all_gather/") + std::string(hzp::coll::wait_policy_name(policy));
      benchmark::RegisterBenchmark(name.c_str(), BM_AllGather, policy)
          ->Arg(8)
          ->Arg(1024)
          ->Arg(4096)
          ->ArgName("bytes")
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    NullReporter null_display, null_file;
    if (rank == 0)
      benchmark::RunSpecifiedBenchmarks();
    else
      benchmark::RunSpecifiedBenchmarks(&null_display, has_out ? &null_file : nullptr);
    g_setups.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    rc = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (g_stats != MPI_COMM_NULL) MPI_Comm_free(&g_stats);
  benchmark::Shutdown();
  MPI_Finalize();
  return rc;
}
