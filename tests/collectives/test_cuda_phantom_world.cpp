// GPU test of a phantom world's calls on device buffers (docs/phantom.md, "On the GPU"): every collective's stand-in,
// enqueued on the caller's stream, against the same call on host buffers (the CPU form, tested on its own in
// test_phantom_world), byte for byte, in fp32 and bf16; the counters' bytes per level and the link model's time equal
// the host call's; and with emulated links the request completes through the stream hold. Exits 77 without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology.hpp"

namespace hzp::test {
namespace {

using coll::CollOp;
using coll::LinkLevel;
using coll::ReduceOp;

coll::MpiCommConfig config(bool links) {
  coll::MpiCommConfig c;
  c.timeout_s = 60;
  if (links) {
    c.links.enabled = true;
    c.links.intra = {2.0, 100.0};   // latency µs, bandwidth GB/s
    c.links.inter = {10.0, 10.0};
  }
  return c;
}

std::vector<float> values(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.37f * static_cast<float>(i % 101) - 11.0f;  // not exact in bf16 x p
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
  return b;
}

template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The same call on a host world and a device world of W = 8 (nodes of 4), rank 3: outputs and counters equal.
template <typename T>
void check_every_op(bool links) {
  Gpu gpu;
  const coll::Topology topo = coll::Topology::virtual_nodes(8, 4, 3);
  auto host = coll::make_phantom_world(topo, config(links), 3);
  auto dev = coll::make_phantom_world(topo, config(links), 3);
  const DType t = dtype_of_v<T>;
  const auto h0 = host->counters().snapshot(), d0 = dev->counters().snapshot();
  const std::int64_t n = 3001, p = 8;
  std::vector<T> in;
  if constexpr (std::is_same_v<T, bf16>) in = to_bf16(values(static_cast<std::size_t>(n * p)));
  else in = values(static_cast<std::size_t>(n * p));
  const std::vector<T> block(in.begin(), in.begin() + n);

  // all_gather (out of place, then in place), reduce_scatter sum and max, all_reduce sum and min, broadcast.
  std::vector<T> h_out(static_cast<std::size_t>(n * p));
  auto d_in = gpu.upload(block, Shape{n});
  auto d_out = gpu.empty(Shape{n * p}, t);
  host->all_gather(ConstTensorView(block.data(), Shape{n}, t), TensorView(h_out.data(), Shape{n * p}, t),
                   StreamRef::host());
  dev->all_gather(d_in.view, d_out.view, gpu.stream());
  EXPECT_TRUE(same_bytes(gpu.download<T>(d_out.view), h_out)) << "all_gather";
  auto d_whole = gpu.upload(in, Shape{n * p});
  dev->all_gather(ConstTensorView(static_cast<std::byte*>(d_whole.view.data()) + 3 * n * sizeof(T), Shape{n}, t,
                                  gpu.device()),
                  d_whole.view, gpu.stream());
  std::vector<T> want_in_place(static_cast<std::size_t>(n * p));
  for (std::int64_t q = 0; q < p; ++q)
    std::copy(in.begin() + 3 * n, in.begin() + 4 * n, want_in_place.begin() + q * n);
  EXPECT_TRUE(same_bytes(gpu.download<T>(d_whole.view), want_in_place)) << "all_gather in place";

  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    std::vector<T> h(static_cast<std::size_t>(n));
    auto d_all = gpu.upload(in, Shape{n * p});
    auto d_rs = gpu.empty(Shape{n}, t);
    host->reduce_scatter(ConstTensorView(in.data(), Shape{n * p}, t), TensorView(h.data(), Shape{n}, t), op,
                         StreamRef::host());
    dev->reduce_scatter(d_all.view, d_rs.view, op, gpu.stream());
    EXPECT_TRUE(same_bytes(gpu.download<T>(d_rs.view), h)) << "reduce_scatter " << static_cast<int>(op);
  }
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::min}) {
    std::vector<T> h(block);
    auto d = gpu.upload(block, Shape{n});
    host->all_reduce(TensorView(h.data(), Shape{n}, t), op, StreamRef::host());
    dev->all_reduce(d.view, op, gpu.stream());
    EXPECT_TRUE(same_bytes(gpu.download<T>(d.view), h)) << "all_reduce " << static_cast<int>(op);
  }
  {
    auto d = gpu.upload(block, Shape{n});
    dev->broadcast(d.view, 5, gpu.stream());
    EXPECT_TRUE(same_bytes(gpu.download<T>(d.view), block)) << "broadcast";
    std::vector<T> h(block);
    host->broadcast(TensorView(h.data(), Shape{n}, t), 5, StreamRef::host());
  }
  // all_to_allv: blocks cut or padded with zeros.
  const std::vector<std::int64_t> send{5, 9, 2, 40, 3, 3, 3, 3}, recv{7, 1, 0, 40, 60, 3, 3, 3};
  {
    std::vector<T> h(120);
    auto d_src = gpu.upload(std::vector<T>(in.begin(), in.begin() + 68), Shape{68});
    auto d_dst = gpu.empty(Shape{120}, t);
    host->start_all_to_allv(ConstTensorView(in.data(), Shape{68}, t), send, TensorView(h.data(), Shape{120}, t), recv,
                            StreamRef::host())
        .wait();
    dev->start_all_to_allv(d_src.view, send, d_dst.view, recv, gpu.stream()).wait();
    EXPECT_TRUE(same_bytes(gpu.download<T>(d_dst.view), h)) << "all_to_allv";
  }
  // Every call recorded with the host call's bytes per level and, with links, its modelled time.
  const auto hr = host->counters().delta(h0), dr = dev->counters().delta(d0);
  ASSERT_EQ(hr.records.size(), dr.records.size());
  for (std::size_t i = 0; i < hr.records.size(); ++i) {
    EXPECT_EQ(hr.records[i].op, dr.records[i].op) << i;
    EXPECT_EQ(hr.records[i].bytes, dr.records[i].bytes) << coll::coll_op_name(hr.records[i].op);
    EXPECT_EQ(hr.records[i].algorithm, dr.records[i].algorithm) << i;
    EXPECT_DOUBLE_EQ(hr.records[i].modelled_s, dr.records[i].modelled_s) << coll::coll_op_name(hr.records[i].op);
    if (links && dr.records[i].bytes[static_cast<int>(LinkLevel::inter)] > 0) {
      EXPECT_GT(dr.records[i].modelled_s, 0.0) << coll::coll_op_name(dr.records[i].op);
    }
  }
}

TEST(CudaPhantomWorld, Fp32StandInsAndBytesEqualTheHostForm) { check_every_op<float>(false); }
TEST(CudaPhantomWorld, Bf16StandInsAndBytesEqualTheHostForm) { check_every_op<bf16>(false); }
TEST(CudaPhantomWorld, WithEmulatedLinksTheStreamHoldCompletesEveryCall) { check_every_op<float>(true); }

TEST(CudaPhantomWorld, HostScalarsStillWorkBesideDeviceCalls) {
  // The loss and the norm's sum of squares are host buffers with the host stream, as the NCCL communicator stages
  // them: the host form, three ranks' copies summed.
  Gpu gpu;
  auto w = coll::make_phantom_world(coll::Topology::virtual_nodes(3, 3, 0), config(false), 0);
  double loss = 2.5;
  w->all_reduce(TensorView(&loss, Shape{1}, DType::f64), ReduceOp::sum, StreamRef::host());
  EXPECT_EQ(loss, 7.5);
  auto d = gpu.upload(std::vector<float>{1.0f, -2.0f}, Shape{2});
  w->all_reduce(d.view, ReduceOp::sum, gpu.stream());
  EXPECT_EQ(gpu.download<float>(d.view), (std::vector<float>{3.0f, -6.0f}));
  // A device buffer with the host stream is refused, naming both.
  EXPECT_THROW(w->all_reduce(d.view, ReduceOp::sum, StreamRef::host()), Error);
}

}  // namespace
}  // namespace hzp::test
