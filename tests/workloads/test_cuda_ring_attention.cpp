// GPU test (label gpu, exit 77 without a device) of ring attention on a CUDA stream with its exchanges on a stream
// of their own (docs/cuda.md "Context parallelism on the GPU"), on one GPU: the cp group is a phantom world of two
// ranks (docs/phantom.md, "On the GPU"; the absent rank's blocks arrive as zeros), so each rank of cp = 2 runs its
// whole pass here. The reference is the same pass on the host (the CPU kernels, over the same phantom group on host
// buffers): out, lse, dq, dk and dv within the blocked kernels' bounds (fp32 1e-5, bf16 1.5e-2), every output
// poisoned first. The device stall clock observing the compute stream must see only at-use waits, one before each
// step that reads what arrived and one for the last dK/dV hop (cp − 1 in forward, cp in backward): with the
// exchanges issued on the compute stream, as before, it saw an at-issue stall per message instead. Given the step's
// request keeper (kept, as the step driver's on a CUDA stream), the passes leave their batches in it (cp − 1 after
// forward, 2·cp − 1 more after backward) instead of the host waiting at each pass's end, with the same results and
// stalls, and complete() then finds them done; the backward's slots reuse the blocks the forward returned to the
// allocator while its exchanges were still only stream-ordered, not waited.
// Written without a GPU: never run yet (docs/cuda.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/workloads/ring_attention.hpp"
#include "random_values.hpp"

namespace hzp::test {
namespace {

using workloads::ContextShard;
using workloads::RingAttention;
using workloads::RingAttentionDims;
using workloads::RingExchangeLane;

constexpr int kCp = 2;
constexpr std::int64_t kSeq = 2 * kCp * 24;  // chunks of 24 rows
const RingAttentionDims kDims{.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};

/// max |got − want| / max |want| (0 when both are all zeros: the phantom ring's dK/dV come home as zeros).
template <typename T>
double rel_error(const std::vector<T>& got, const std::vector<T>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

coll::MpiCommConfig phantom_config() {
  coll::MpiCommConfig c;
  c.timeout_s = 60;
  return c;
}

template <typename T>
struct Pass {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  std::vector<T> out, dq, dk, dv;
  std::vector<Acc> lse;
};

template <typename T>
struct Inputs {
  std::vector<T> q, k, v, dout;
};

template <typename T>
Inputs<T> inputs(const ContextShard& shard) {
  const std::int64_t rows = kDims.batch * shard.local_len();
  const auto nq = static_cast<std::size_t>(rows * kDims.heads * kDims.head_dim);
  const auto nkv = static_cast<std::size_t>(rows * kDims.kv_heads * kDims.head_dim);
  return {random_values<T>(nq, 2.0, 21 + shard.rank()), random_values<T>(nkv, 2.0, 31 + shard.rank()),
          random_values<T>(nkv, 1.0, 41 + shard.rank()), random_values<T>(nq, 1.0, 51 + shard.rank())};
}

// The reference: the same rank's pass on the host, over a phantom group on host buffers.
template <typename T>
Pass<T> host_pass(const ContextShard& shard, const Inputs<T>& in) {
  using Acc = typename Pass<T>::Acc;
  const DType dt = dtype_of_v<T>, at = dtype_of_v<Acc>;
  const std::int64_t B = kDims.batch, L = shard.local_len(), H = kDims.heads, KV = kDims.kv_heads,
                     D = kDims.head_dim;
  auto group = coll::make_phantom_world(coll::Topology::virtual_nodes(kCp, kCp, shard.rank()), phantom_config(),
                                        shard.rank());
  HostBacking backing;
  CachingAllocator alloc(backing);
  RingAttention ring(*group, shard, kDims, dt, alloc);
  Pass<T> p{std::vector<T>(in.q.size(), T(-7)), std::vector<T>(in.q.size(), T(-7)), std::vector<T>(in.k.size(), T(-7)),
            std::vector<T>(in.k.size(), T(-7)), std::vector<Acc>(static_cast<std::size_t>(B * H * L), Acc(-7))};
  auto v = [](auto& x, Shape s, DType t) { return TensorView(x.data(), s, t); };
  auto c = [](const auto& x, Shape s, DType t) { return ConstTensorView(x.data(), s, t); };
  ring.forward(v(p.out, {B * L, H * D}, dt), v(p.lse, {B, H, L}, at), c(in.q, {B * L, H * D}, dt),
               c(in.k, {B * L, KV * D}, dt), c(in.v, {B * L, KV * D}, dt), StreamRef::host());
  ring.backward(v(p.dq, {B * L, H * D}, dt), v(p.dk, {B * L, KV * D}, dt), v(p.dv, {B * L, KV * D}, dt),
                c(in.dout, {B * L, H * D}, dt), c(in.q, {B * L, H * D}, dt), c(in.k, {B * L, KV * D}, dt),
                c(in.v, {B * L, KV * D}, dt), c(p.out, {B * L, H * D}, dt), c(p.lse, {B, H, L}, at),
                StreamRef::host());
  return p;
}

// What a kept pass left in the keeper: after forward, after backward.
struct KeptCounts {
  std::size_t forward = 0, backward = 0;
};

// The pass on the GPU, the compute stream observed by a stall clock; `lane` null lets the ring make its own; `kept`
// non-null: the passes hand their requests to a keeper that keeps (on the compute stream), completed at the end.
template <typename T>
Pass<T> device_pass(Gpu& gpu, const ContextShard& shard, const Inputs<T>& in, RingExchangeLane* lane,
                    std::vector<coll::Stall>& stalls, KeptCounts* kept = nullptr) {
  using Acc = typename Pass<T>::Acc;
  const DType dt = dtype_of_v<T>;
  const std::int64_t B = kDims.batch, L = shard.local_len(), H = kDims.heads, KV = kDims.kv_heads,
                     D = kDims.head_dim;
  auto group = coll::make_phantom_world(coll::Topology::virtual_nodes(kCp, kCp, shard.rank()), phantom_config(),
                                        shard.rank());
  auto q = gpu.upload(in.q, {B * L, H * D}), k = gpu.upload(in.k, {B * L, KV * D});
  auto v = gpu.upload(in.v, {B * L, KV * D}), dout = gpu.upload(in.dout, {B * L, H * D});
  auto out = gpu.upload(std::vector<T>(in.q.size(), T(-7)), {B * L, H * D});
  auto dq = gpu.upload(std::vector<T>(in.q.size(), T(-7)), {B * L, H * D});
  auto dk = gpu.upload(std::vector<T>(in.k.size(), T(-7)), {B * L, KV * D});
  auto dv = gpu.upload(std::vector<T>(in.k.size(), T(-7)), {B * L, KV * D});
  auto lse = gpu.upload(std::vector<Acc>(static_cast<std::size_t>(B * H * L), Acc(-7)), {B, H, L});

  coll::DeviceStallClock clock(gpu.stream());
  coll::StreamOrderedRequests keeper(gpu.stream());  // kept: a CUDA stream's default
  {
    const coll::DeviceWaitScope observed(&clock);
    RingAttention ring(*group, shard, kDims, dt, gpu.allocator(), lane, kept ? &keeper : nullptr);
    ring.forward(out.view, lse.view, q.view, k.view, v.view, gpu.stream());
    if (kept) kept->forward = keeper.kept();
    ring.backward(dq.view, dk.view, dv.view, dout.view, q.view, k.view, v.view, out.view, lse.view, gpu.stream());
    if (kept) kept->backward = keeper.kept();
  }
  keeper.complete();  // the step's end: synchronises the stream, then every kept request is done
  gpu.stream().synchronize();
  stalls = clock.settle();
  return {gpu.download<T>(out.view), gpu.download<T>(dq.view), gpu.download<T>(dk.view), gpu.download<T>(dv.view),
          gpu.download<Acc>(lse.view)};
}

template <typename T>
void expect_ring_on_lane_matches_host(double fwd_tol, double bwd_tol, bool own_lane, bool keep = false) {
  Gpu gpu;
  for (int rank = 0; rank < kCp; ++rank) {
    const ContextShard shard(kSeq, kCp, rank);
    const std::string label = std::string(dtype_name(dtype_of_v<T>)) + " rank " + std::to_string(rank) +
                              (own_lane ? " (the ring's own lane)" : " (a given lane)") + (keep ? " kept" : "");
    const Inputs<T> in = inputs<T>(shard);
    const Pass<T> want = host_pass(shard, in);
    RingExchangeLane lane(gpu.device());
    std::vector<coll::Stall> stalls;
    KeptCounts counts;
    const Pass<T> got = device_pass(gpu, shard, in, own_lane ? nullptr : &lane, stalls, keep ? &counts : nullptr);
    if (keep) {
      EXPECT_EQ(counts.forward, static_cast<std::size_t>(kCp - 1)) << label << ": the forward's batches kept";
      EXPECT_EQ(counts.backward, static_cast<std::size_t>((kCp - 1) + (kCp - 1) + kCp))
          << label << ": the backward's K/V and dK/dV batches kept beside the forward's";
    }

    EXPECT_LE(rel_error(got.out, want.out), fwd_tol) << label << ": out";
    EXPECT_LE(rel_error(got.lse, want.lse), fwd_tol) << label << ": lse";
    EXPECT_LE(rel_error(got.dq, want.dq), bwd_tol) << label << ": dq";
    EXPECT_LE(rel_error(got.dk, want.dk), bwd_tol) << label << ": dk";
    EXPECT_LE(rel_error(got.dv, want.dv), bwd_tol) << label << ": dv";

    // The compute stream waits where it reads what arrived, never where an exchange is issued.
    std::size_t at_use = 0, at_issue = 0;
    for (const coll::Stall& s : stalls) {
      (s.kind == coll::StallKind::at_use ? at_use : at_issue) += 1;
      EXPECT_GE(s.seconds, 0.0) << label;
    }
    EXPECT_EQ(at_issue, 0u) << label << ": the compute stream waited where an exchange was issued";
    EXPECT_EQ(at_use, static_cast<std::size_t>((kCp - 1) + kCp))
        << label << ": one wait before each step that reads a received block, and one for the last dK/dV hop";
  }
}

TEST(CudaRingAttention, ExchangesOnTheLaneMatchTheHostRingFp32) {
  expect_ring_on_lane_matches_host<float>(1e-5, 1e-5, false);
}
TEST(CudaRingAttention, ExchangesOnTheLaneMatchTheHostRingBf16) {
  expect_ring_on_lane_matches_host<bf16>(1.5e-2, 1.5e-2, false);
}
TEST(CudaRingAttention, RingMakesItsOwnLaneWhenNoneIsGiven) {
  expect_ring_on_lane_matches_host<float>(1e-5, 1e-5, true);
}
TEST(CudaRingAttention, KeptExchangesMatchTheHostRingFp32) {
  expect_ring_on_lane_matches_host<float>(1e-5, 1e-5, false, true);
}

}  // namespace
}  // namespace hzp::test
