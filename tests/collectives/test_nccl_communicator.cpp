// GPU test of the NCCL communicator on one GPU (a one-rank communicator, as issue 11 asks): every
// collective on device buffers with exact results, ordering after and before the caller's stream,
// counters, split/duplicate, and the GPU link-emulation hold (the stream is held for the modelled time
// while another stream's work proceeds). Exits 77 without a GPU; the MPI bootstrap has its own
// multi-rank CPU test (test_mpi_bootstrap).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/core/clock.hpp"

namespace hzp::test {
namespace {

using coll::SelfBootstrap;  // one process, one rank: the unique id needs no exchange

coll::NcclCommConfig config() {
  coll::NcclCommConfig c;
  c.name = "world";
  c.device = 0;
  c.timeout_s = 60;
  return c;
}

std::vector<float> iota_vec(std::size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(NcclCommunicator, OneRankCollectivesAreExactAndOrderedOnTheCallersStream) {
  if (!coll::nccl_available()) GTEST_SKIP() << "built without NCCL";
  Gpu gpu;
  SelfBootstrap boot;
  coll::NcclCommunicator comm(boot, config());
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.device(), Device::cuda(0));
  const auto host = iota_vec(1 << 20, 1.0f);
  auto buf = gpu.upload(host, {1 << 20});
  comm.all_reduce(buf.view, coll::ReduceOp::sum, gpu.stream());
  EXPECT_EQ(gpu.download<float>(buf.view), host);
  auto out = gpu.empty({1 << 20}, DType::f32);
  comm.all_gather(buf.view, out.view, gpu.stream());
  EXPECT_EQ(gpu.download<float>(out.view), host);
  comm.reduce_scatter(buf.view, out.view, coll::ReduceOp::max, gpu.stream());
  EXPECT_EQ(gpu.download<float>(out.view), host);
  comm.broadcast(buf.view, 0, gpu.stream());
  comm.all_to_all(buf.view, out.view, gpu.stream());
  EXPECT_EQ(gpu.download<float>(out.view), host);
  comm.barrier();

  // Non-blocking, then work on the caller's stream that must see the result: enqueue order suffices.
  auto a = gpu.upload(host, {1 << 20});
  coll::Request r = comm.start_all_reduce(a.view, coll::ReduceOp::sum, gpu.stream());
  auto b = gpu.empty({1 << 20}, DType::f32);
  copy_bytes(b.view.data(), gpu.device(), a.view.data(), gpu.device(), a.view.bytes(), gpu.stream());
  r.wait();
  EXPECT_EQ(gpu.download<float>(b.view), host);

  const coll::CounterSnapshot snap = comm.counters().snapshot();
  EXPECT_EQ(snap.total(coll::CollOp::all_reduce).calls, 2u);
  EXPECT_EQ(snap.total(coll::CollOp::all_gather).elements, 1 << 20);
  EXPECT_EQ(snap.bytes(coll::LinkLevel::intra), 0u);  // one rank sends nothing
}

TEST(NcclCommunicator, SplitAndDuplicateGiveWorkingCommunicators) {
  if (!coll::nccl_available()) GTEST_SKIP() << "built without NCCL";
  Gpu gpu;
  SelfBootstrap boot;
  coll::NcclCommunicator comm(boot, config());
  auto dup = comm.duplicate("dup");
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(dup->name(), "dup");
  EXPECT_EQ(comm.split(-1, 0, "none"), nullptr);
  auto h = iota_vec(1000, 3.0f);
  auto d = gpu.upload(h, {1000});
  dup->all_reduce(d.view, coll::ReduceOp::sum, gpu.stream());
  EXPECT_EQ(gpu.download<float>(d.view), h);
  EXPECT_EQ(comm.counters().snapshot().total("dup", coll::CollOp::all_reduce).calls, 1u);  // shared counters
}

TEST(NcclCommunicator, HostBuffersAreRefusedNamingTheDevice) {
  if (!coll::nccl_available()) GTEST_SKIP() << "built without NCCL";
  Gpu gpu;
  SelfBootstrap boot;
  coll::NcclCommunicator comm(boot, config());
  std::vector<float> h(4);
  try {
    comm.all_reduce(TensorView(h.data(), Shape{4}, DType::f32), coll::ReduceOp::sum, gpu.stream());
    FAIL() << "accepted a host buffer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("buf is on cpu, expected cuda:0"), std::string::npos) << e.what();
  }
}

TEST(GpuLinkHold, HoldsOneStreamForTheModelledTimeWhileAnotherStreamRuns) {
  Gpu gpu;
  Stream held(Device::cuda(0)), other(Device::cuda(0));
  TimedEvent t0(Device::cuda(0)), t1(Device::cuda(0));
  coll::GpuLinkHold hold;
  t0.record(held);
  hold.start(held);
  hold.finish(held, 0.2);  // 200 ms with no real work in between: all of it is slept
  t1.record(held);
  // The other stream is not blocked: its copy finishes while the hold lasts.
  auto a = gpu.empty({1 << 20}, DType::f32);
  const double before = wall_seconds();
  zero_bytes(a.view.data(), a.view.bytes(), other);
  other.ref().synchronize();
  EXPECT_LT(wall_seconds() - before, 0.15);
  t1.synchronize();
  EXPECT_GE(TimedEvent::elapsed_ms(t0, t1), 195.0);
  EXPECT_GE(hold.slept_s(), 0.15);
}

TEST(NcclCommunicator, LinkEmulationRecordsTheModelledAndSleptTime) {
  if (!coll::nccl_available()) GTEST_SKIP() << "built without NCCL";
  Gpu gpu;
  SelfBootstrap boot;
  coll::NcclCommConfig c = config();
  c.links.enabled = true;
  coll::NcclCommunicator comm(boot, c);
  auto d = gpu.empty({1 << 20}, DType::f32);
  zero_bytes(d.view.data(), d.view.bytes(), gpu.stream());
  comm.all_reduce(d.view, coll::ReduceOp::sum, gpu.stream());
  // One rank moves no bytes, so the model (and the hold) is zero: the record says so.
  const auto recs = comm.counters().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].modelled_s, 0.0);
  EXPECT_EQ(recs[0].emulated_s, 0.0);
}

}  // namespace
}  // namespace hzp::test
