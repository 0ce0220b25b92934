// Ring attention (workloads/ring_attention.hpp) under mpiexec at 2 and 4 ranks, in groups of cp = 2 and (at 4
// ranks) cp = 4: every rank computes the whole sequences' attention_fwd / attention_bwd itself (no communication:
// the independent reference), takes its own rows of them, and compares out, lse and dq of its queries and dk, dv
// of its keys with what the ring computed, in fp64, fp32 and bf16. The cp group's counters must show exactly the
// messages RingAttention::messages() declares, every rank must compute the same number of visible pairs (the
// shard's load balance), and bad arguments are refused by name (a request keeper that keeps on the host stream over
// real peers among them).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "data_test_util.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/workloads/ring_attention.hpp"
#include "mpi_test.hpp"
#include "random_values.hpp"

namespace hzp::test {
namespace {

using workloads::ContextShard;
using workloads::RingAttention;
using workloads::RingAttentionDims;

const StreamRef kHost = StreamRef::host();

template <typename T>
TensorView view(std::vector<T>& x, Shape s) {
  return {x.data(), s, dtype_of_v<T>};
}
template <typename T>
ConstTensorView cview(const std::vector<T>& x, Shape s) {
  return {x.data(), s, dtype_of_v<T>};
}

/// The rank's rows of an [outer, T, row] layout ([B, T, N·D] activations, or [B, H, T] statistics seen as
/// [B·H, T, 1]), in the shard's local order: its early chunk, then its late one.
template <typename T>
std::vector<T> take(const std::vector<T>& whole, const ContextShard& sh, std::int64_t outer, std::int64_t row) {
  const std::int64_t C = sh.chunk_len(), L = sh.local_len(), S = sh.seq_len();
  std::vector<T> mine(static_cast<std::size_t>(outer * L * row));
  for (std::int64_t o = 0; o < outer; ++o)
    for (int c = 0; c < 2; ++c)
      std::copy_n(whole.begin() + (o * S + sh.chunk(c) * C) * row, C * row, mine.begin() + (o * L + c * C) * row);
  return mine;
}

/// max |got − want| / max |want|.
template <typename T, typename U>
double rel_error(const std::vector<T>& got, const std::vector<U>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

struct Worst {
  double fwd = 0, bwd = 0;
};

template <typename T>
Worst expect_ring_matches(coll::Communicator& cp, std::int64_t seq_len, double fwd_tol, double bwd_tol) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const RingAttentionDims dims{.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 8};
  const std::int64_t B = dims.batch, H = dims.heads, KV = dims.kv_heads, D = dims.head_dim, S = seq_len;
  const ContextShard shard(S, cp.size(), cp.rank());
  const std::int64_t L = shard.local_len();
  const DType dt = dtype_of_v<T>;
  const std::string label = std::string(dtype_name(dt)) + " cp=" + std::to_string(cp.size()) +
                            " T=" + std::to_string(S) + " rank " + std::to_string(cp.rank());

  // Identical on every rank: the whole sequences, and the whole-sequence reference computed from them.
  const auto q = random_values<T>(static_cast<std::size_t>(B * S * H * D), 2.0, 11);
  const auto k = random_values<T>(static_cast<std::size_t>(B * S * KV * D), 2.0, 12);
  const auto v = random_values<T>(static_cast<std::size_t>(B * S * KV * D), 1.0, 13);
  const auto dout = random_values<T>(static_cast<std::size_t>(B * S * H * D), 1.0, 14);
  const kernels::AttentionDims whole{B, S, H, KV, D};
  std::vector<T> out_ref(q.size()), dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  std::vector<Acc> lse_ref(static_cast<std::size_t>(B * H * S));
  std::vector<std::byte> ws(
      std::max(kernels::attention_fwd_workspace_bytes(whole, dt), kernels::attention_bwd_workspace_bytes(whole, dt)));
  kernels::attention_fwd(view(out_ref, {B, S, H, D}), view(lse_ref, {B, H, S}), cview(q, {B, S, H, D}),
                         cview(k, {B, S, KV, D}), cview(v, {B, S, KV, D}), whole, ws, kHost);
  kernels::attention_bwd(view(dq_ref, {B, S, H, D}), view(dk_ref, {B, S, KV, D}), view(dv_ref, {B, S, KV, D}),
                         cview(dout, {B, S, H, D}), cview(q, {B, S, H, D}), cview(k, {B, S, KV, D}),
                         cview(v, {B, S, KV, D}), cview(out_ref, {B, S, H, D}), cview(lse_ref, {B, H, S}), whole, ws,
                         kHost);

  // This rank's pieces.
  const auto my_q = take(q, shard, B, H * D), my_dout = take(dout, shard, B, H * D);
  const auto my_k = take(k, shard, B, KV * D), my_v = take(v, shard, B, KV * D);
  std::vector<T> out(my_q.size(), T(-7)), dq(my_q.size(), T(-7)), dk(my_k.size(), T(-7)), dv(my_v.size(), T(-7));
  std::vector<Acc> lse(static_cast<std::size_t>(B * H * L), Acc(-7));

  HostBacking backing;
  CachingAllocator alloc(backing);
  RingAttention ring(cp, shard, dims, dt, alloc);
  const coll::CounterSnapshot before = cp.counters().snapshot();
  ring.forward(view(out, {B * L, H * D}), view(lse, {B, H, L}), cview(my_q, {B * L, H * D}),
               cview(my_k, {B * L, KV * D}), cview(my_v, {B * L, KV * D}), kHost);
  const coll::CounterSnapshot fwd = cp.counters().delta(before);
  const coll::CounterSnapshot mid = cp.counters().snapshot();
  ring.backward(view(dq, {B * L, H * D}), view(dk, {B * L, KV * D}), view(dv, {B * L, KV * D}),
                cview(my_dout, {B * L, H * D}), cview(my_q, {B * L, H * D}), cview(my_k, {B * L, KV * D}),
                cview(my_v, {B * L, KV * D}), cview(out, {B * L, H * D}), cview(lse, {B, H, L}), kHost);
  const coll::CounterSnapshot bwd = cp.counters().delta(mid);

  Worst w;
  const double e_out = rel_error(out, take(out_ref, shard, B, H * D));
  const double e_lse = rel_error(lse, take(lse_ref, shard, B * H, 1));
  const double e_dq = rel_error(dq, take(dq_ref, shard, B, H * D));
  const double e_dk = rel_error(dk, take(dk_ref, shard, B, KV * D));
  const double e_dv = rel_error(dv, take(dv_ref, shard, B, KV * D));
  EXPECT_LE(e_out, fwd_tol) << label << ": out";
  EXPECT_LE(e_lse, fwd_tol) << label << ": lse";
  EXPECT_LE(e_dq, bwd_tol) << label << ": dq";
  EXPECT_LE(e_dk, bwd_tol) << label << ": dk";
  EXPECT_LE(e_dv, bwd_tol) << label << ": dv";
  w.fwd = std::max(e_out, e_lse);
  w.bwd = std::max({e_dq, e_dk, e_dv});

  // Exactly the declared messages: sends and receives of one K/V/dK/dV block each, nothing else.
  for (bool backward : {false, true}) {
    const coll::CounterSnapshot& d = backward ? bwd : fwd;
    const auto m = RingAttention::messages(shard, dims, dt, backward);
    const std::string pass = label + (backward ? " backward" : " forward");
    EXPECT_EQ(m.sends, cp.size() == 1 ? 0 : (backward ? 4 * (cp.size() - 1) + 2 : 2 * (cp.size() - 1))) << pass;
    EXPECT_EQ(m.elements, B * L * KV * D) << pass;
    const coll::OpTotals sends = d.total("cp", coll::CollOp::send), recvs = d.total("cp", coll::CollOp::recv);
    EXPECT_EQ(sends.calls, static_cast<std::uint64_t>(m.sends)) << pass;
    EXPECT_EQ(sends.elements, m.sends * m.elements) << pass;
    EXPECT_EQ(recvs.calls, static_cast<std::uint64_t>(m.sends)) << pass;
    EXPECT_EQ(recvs.elements, m.sends * m.elements) << pass;
    std::uint64_t sent = 0;
    for (const coll::LevelTotals& l : sends.level) sent += l.bytes;
    EXPECT_EQ(sent, static_cast<std::uint64_t>(m.bytes())) << pass << ": bytes sent";
    EXPECT_EQ(d.calls(), sends.calls + recvs.calls) << pass << ": nothing but the ring's messages";
  }

  // Load balance: every rank computes the same visible pairs, 1/cp of the whole causal triangle.
  const std::int64_t triangle = B * H * S * (S + 1) / 2;
  EXPECT_EQ(RingAttention::visible_pairs(shard, dims) * cp.size(), triangle) << label;
  EXPECT_EQ(ring.forward_pairs(), RingAttention::visible_pairs(shard, dims)) << label;
  EXPECT_EQ(ring.backward_pairs(), RingAttention::visible_pairs(shard, dims)) << label;
  std::vector<double> pairs_max{static_cast<double>(ring.forward_pairs())}, pairs_min = pairs_max;
  cp.all_reduce(view(pairs_max, {1}), coll::ReduceOp::max, kHost);
  cp.all_reduce(view(pairs_min, {1}), coll::ReduceOp::min, kHost);
  EXPECT_EQ(pairs_max[0], pairs_min[0]) << label << ": the ranks' attention work differs";

  // Every buffer went back to the allocator, and only comm and workspace were used.
  const AllocatorStats st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, 0u) << label;
  EXPECT_EQ(st.tag(AllocationTag::activation).peak_requested_bytes, 0u) << label;
  if (cp.size() > 1) {
    EXPECT_GT(st.tag(AllocationTag::comm).peak_requested_bytes, 0u) << label;
  }
  return w;
}

std::unique_ptr<coll::MpiCommunicator> world_comm() {
  const int w = world_size(), r = world_rank();
  return coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
}

TEST(RingAttention, MatchesTheWholeSequenceAttention) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = world_comm();
  const int w = world_size(), r = world_rank();
  Worst f64, f32, b16;
  for (int cp_size : {2, 4}) {
    if (w % cp_size != 0) continue;
    auto cp = world->split(r / cp_size, r % cp_size, "cp");
    for (std::int64_t T : {std::int64_t{32}, std::int64_t{16}}) {
      const Worst a = expect_ring_matches<double>(*cp, T, 1e-12, 1e-11);
      const Worst b = expect_ring_matches<float>(*cp, T, 1e-5, 1e-4);
      f64 = {std::max(f64.fwd, a.fwd), std::max(f64.bwd, a.bwd)};
      f32 = {std::max(f32.fwd, b.fwd), std::max(f32.bwd, b.bwd)};
      // bf16 stored, fp32 computed: the ring rounds dk/dv once per block it adds, the reference once in all.
      const Worst c = expect_ring_matches<bf16>(*cp, T, 1e-2, 3e-2);
      b16 = {std::max(b16.fwd, c.fwd), std::max(b16.bwd, c.bwd)};
    }
  }
  // The headroom of each tolerance, per rank (run with --gtest_output=xml to read it).
  RecordProperty("worst_f64_forward", std::to_string(f64.fwd));
  RecordProperty("worst_f64_backward", std::to_string(f64.bwd));
  RecordProperty("worst_f32_forward", std::to_string(f32.fwd));
  RecordProperty("worst_f32_backward", std::to_string(f32.bwd));
  RecordProperty("worst_bf16_forward", std::to_string(b16.fwd));
  RecordProperty("worst_bf16_backward", std::to_string(b16.bwd));
  if (std::getenv("HZP_RING_ATTENTION_VERBOSE"))
    std::printf("rank %d worst: f64 fwd %.3g bwd %.3g, f32 fwd %.3g bwd %.3g, bf16 fwd %.3g bwd %.3g\n", r, f64.fwd,
                f64.bwd, f32.fwd, f32.bwd, b16.fwd, b16.bwd);
}

TEST(RingAttention, RefusesMismatchedArguments) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = world_comm();
  const int r = world_rank();
  auto cp = world->split(r / 2, r % 2, "cp");
  HostBacking backing;
  CachingAllocator alloc(backing);
  const RingAttentionDims dims{.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 8};
  // A shard of another group size, or another rank, than the communicator.
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] { RingAttention(*cp, ContextShard(32, 4, cp->rank()), dims, DType::f64, alloc); }, {"of 2", "cp = 4"}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] { RingAttention(*cp, ContextShard(32, 2, 1 - cp->rank()), dims, DType::f64, alloc); },
      {"rank " + std::to_string(cp->rank()) + " of 2", "context shard is rank " + std::to_string(1 - cp->rank())}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        RingAttention(*cp, ContextShard(32, 2, cp->rank()), {.batch = 2, .heads = 4, .kv_heads = 3, .head_dim = 8},
                      DType::f64, alloc);
      },
      {"heads = 4", "kv_heads = 3"}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] { RingAttention(*cp, ContextShard(32, 2, cp->rank()), dims, DType::i32, alloc); },
      {"dtype int32", "fp64, fp32 or bf16"}));

  // Shapes and dtypes of the tensors (checked before any message, so one rank's refusal strands no peer).
  const ContextShard shard(32, 2, cp->rank());
  RingAttention ring(*cp, shard, dims, DType::f64, alloc);
  const std::int64_t L = shard.local_len();  // 16
  std::vector<double> q(static_cast<std::size_t>(2 * L * 32)), k(static_cast<std::size_t>(2 * L * 16)),
      v = k, out = q, lse(static_cast<std::size_t>(2 * 4 * L));
  std::vector<float> lse32(lse.size());
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(view(out, {2 * L, 32}), view(lse, {2, 4, L}), cview(q, {2 * L - 1, 32}), cview(k, {2 * L, 16}),
                     cview(v, {2 * L, 16}), kHost);
      },
      {"q has shape [31, 32]", "expected [32, 32]", "local_len = 16"}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(view(out, {2 * L, 32}), view(lse, {2, 4, L}), cview(q, {2 * L, 32}), cview(k, {2 * L, 32}),
                     cview(v, {2 * L, 16}), kHost);
      },
      {"k has shape [32, 32]", "expected [32, 16]", "kv_heads = 2"}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(view(out, {2 * L, 32}), view(lse32, {2, 4, L}), cview(q, {2 * L, 32}), cview(k, {2 * L, 16}),
                     cview(v, {2 * L, 16}), kHost);
      },
      {"lse holds fp32", "expected fp64"}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(view(out, {2 * L, 32}), view(lse, {2, 4, L - 2}), cview(q, {2 * L, 32}), cview(k, {2 * L, 16}),
                     cview(v, {2 * L, 16}), kHost);
      },
      {"lse has shape [2, 4, 14]", "expected [2, 4, 16]"}));
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.backward(view(q, {2 * L, 32}), view(k, {2 * L, 16}), view(v, {2 * L, 16}), cview(out, {2 * L, 32}),
                      cview(q, {2 * L, 32}), cview(k, {2 * L, 16}), cview(v, {2 * L, 8}), cview(out, {2 * L, 32}),
                      cview(lse, {2, 4, L}), kHost);
      },
      {"v has shape [32, 8]"}));
  // Every tensor in the stream's memory (a CUDA stream's ring keeps its buffers on the device), named with both
  // devices; the document starts given twice (host and stream copies) must agree in length.
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(view(out, {2 * L, 32}), view(lse, {2, 4, L}), cview(q, {2 * L, 32}),
                     ConstTensorView(k.data(), {2 * L, 16}, DType::f64, Device::cuda(0)), cview(v, {2 * L, 16}), kHost);
      },
      {"k must be a non-null tensor on cpu (the stream's memory), not cuda:0"}));
  const std::vector<std::int32_t> first(static_cast<std::size_t>(2 * L), 0), half(static_cast<std::size_t>(L), 0);
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(view(out, {2 * L, 32}), view(lse, {2, 4, L}), cview(q, {2 * L, 32}), cview(k, {2 * L, 16}),
                     cview(v, {2 * L, 16}), kHost, first, half);
      },
      {"stream_first holds 16 document starts but first holds 32"}));
  // A request keeper that keeps on the host stream, over real peers: a host transfer moves only inside the waits a
  // kept request skips, so the pass is refused before its first message (test_llama_cp_keeper keeps over phantom
  // peers, where it is allowed).
  coll::StreamOrderedRequests kept(kHost, coll::StreamOrderedRequests::Completion::kept);
  RingAttention kept_ring(*cp, shard, dims, DType::f64, alloc, nullptr, &kept);
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        kept_ring.forward(view(out, {2 * L, 32}), view(lse, {2, 4, L}), cview(q, {2 * L, 32}), cview(k, {2 * L, 16}),
                          cview(v, {2 * L, 16}), kHost);
      },
      {"keeps requests on the host stream", "over 'cp' whose peers are real", "only over phantom peers"}));
  EXPECT_EQ(kept.kept(), 0u);
}

}  // namespace
}  // namespace hzp::test
