// Counters of the MPI backend: the bytes each rank sent per link level equal byte counts computed
// here from sizes and group shapes (which hop of a ring crosses a node boundary, which partner a
// doubling round pairs with), never from the library's model; per-call records; snapshot/delta;
// shared counters across duplicates; join wait when a peer joins late.
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

using Bytes = std::array<std::uint64_t, kNumLinkLevels>;

// Per-rank byte expectations accumulate hop by hop: `to` is a group rank, `world_of` maps it.
struct Expect {
  int rpn;
  std::vector<int> world_of;
  int me;
  Bytes bytes{};
  void hop(int to, std::uint64_t b) {
    const bool intra = vnode(world_of[static_cast<std::size_t>(me)], rpn) ==
                       vnode(world_of[static_cast<std::size_t>(to)], rpn);
    bytes[intra ? 0 : 1] += b;
  }
};

Expect expect_for(const MpiCommunicator& c, int rpn) {
  Expect e{rpn, {}, c.rank(), {}};
  for (int q = 0; q < c.size(); ++q) e.world_of.push_back(c.world_rank_of(q));
  return e;
}

// The one record the last call left (each test uses fresh counters, or a delta).
CallRecord last_record(Communicator& c) {
  const auto recs = c.counters().records();
  EXPECT_FALSE(recs.empty());
  return recs.empty() ? CallRecord{} : recs.back();
}

void expect_bytes(const CallRecord& r, const Bytes& want, const char* what) {
  EXPECT_EQ(r.bytes[0], want[0]) << what << ": intra-node bytes (" << r.algorithm << ")";
  EXPECT_EQ(r.bytes[1], want[1]) << what << ": inter-node bytes (" << r.algorithm << ")";
}

// Node layouts: one machine node, and virtual nodes of 2 ranks (needs an even world).
class MpiCounters : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    rpn_ = GetParam();
    if (rpn_ > 0 && hzp::test::world_size() % rpn_ != 0) GTEST_SKIP() << "virtual nodes of " << rpn_ << " ranks";
  }
  std::unique_ptr<MpiCommunicator> world(std::size_t small_bytes, bool native = false) {
    MpiCommConfig c = test_config();
    c.small_message_bytes = small_bytes;
    c.mpi_native = native;
    return make_world(c, rpn_);
  }
  int rpn_ = 0;
};

TEST_P(MpiCounters, RingAllGatherSendsEveryBlockButOneToTheRight) {
  for (bool native : {false, true}) {
    auto w = world(0, native);
    const int p = w->size(), r = w->rank();
    const std::int64_t n = 37;
    Buffer in(DType::f32, n), out(DType::f32, n * p);
    w->all_gather(in.cview(), out.view(), StreamRef::host());
    // Each rank sends (p - 1) blocks of n fp32 to rank + 1; that hop is inter-node only at a node
    // boundary: with virtual nodes of 2, odd ranks send across, even ranks inside.
    Expect e = expect_for(*w, rpn_);
    e.hop((r + 1) % p, static_cast<std::uint64_t>((p - 1) * n * 4));
    const CallRecord rec = last_record(*w);
    expect_bytes(rec, p > 1 ? e.bytes : Bytes{}, "ring all_gather");
    EXPECT_EQ(rec.bytes_modelled, native);
    EXPECT_EQ(rec.op, CollOp::all_gather);
    EXPECT_EQ(rec.count, n);
    EXPECT_EQ(rec.dtype, DType::f32);
    EXPECT_EQ(rec.group_size, p);
    EXPECT_EQ(w->counters().group_name(rec.group), "world");
    EXPECT_EQ(rec.thread_id, static_cast<std::uint64_t>(syscall(SYS_gettid)));
    EXPECT_LE(rec.start_s, rec.end_s);
  }
}

TEST_P(MpiCounters, RingReduceScatterFp32AndBf16) {
  auto w = world(0);
  const int p = w->size(), r = w->rank();
  const std::int64_t n = 21;
  for (DType t : {DType::f32, DType::bf16}) {
    Buffer in(t, n * p), out(t, n);
    w->reduce_scatter(in.cview(), out.view(), ReduceOp::sum, StreamRef::host());
    // p - 1 hops to rank + 1 of n elements: the first carries the rank's own input (its dtype),
    // later ones partial sums in the accumulator (fp32 for bf16).
    Expect e = expect_for(*w, rpn_);
    if (p > 1) e.hop((r + 1) % p, static_cast<std::uint64_t>(n * dtype_size(t)));
    for (int s = 1; s < p - 1; ++s) e.hop((r + 1) % p, static_cast<std::uint64_t>(n * 4));
    expect_bytes(last_record(*w), e.bytes, t == DType::f32 ? "ring reduce_scatter fp32" : "ring reduce_scatter bf16");
  }
}

TEST_P(MpiCounters, RingAllReduceOfOddLength) {
  auto w = world(0);
  const int p = w->size(), r = w->rank();
  const std::int64_t N = 103;  // chunks of N/p, the first N%p one longer
  auto chunk = [&](int j) { return N / p + (j < N % p ? 1 : 0); };
  for (DType t : {DType::f32, DType::bf16}) {
    Buffer buf(t, N);
    w->all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
    // Reduce-scatter phase: round s sends chunk (r - s - 1): every chunk but r's own; the first in
    // the dtype, the rest as fp32 partials. All-gather phase: round s sends finished chunk (r - s),
    // in the dtype: every chunk but (r + 1)'s.
    const std::uint64_t e_in = dtype_size(t);
    std::uint64_t b = 0;
    if (p > 1) {
      for (int s = 0; s < p - 1; ++s) b += static_cast<std::uint64_t>(chunk(((r - s - 1) % p + p) % p)) * (s == 0 ? e_in : 4);
      for (int s = 0; s < p - 1; ++s) b += static_cast<std::uint64_t>(chunk(((r - s) % p + p) % p)) * e_in;
    }
    Expect e = expect_for(*w, rpn_);
    e.hop((r + 1) % p, b);
    expect_bytes(last_record(*w), e.bytes, "ring all_reduce");
  }
}

TEST_P(MpiCounters, SmallAlgorithmsBruckDirectDoubling) {
  auto w = world(std::size_t{1} << 40);
  const int p = w->size(), r = w->rank();
  const std::int64_t n = 6;
  {  // Bruck: round k sends min(2^k, p - 2^k) blocks to rank - 2^k.
    Buffer in(DType::f32, n), out(DType::f32, n * p);
    w->all_gather(in.cview(), out.view(), StreamRef::host());
    Expect e = expect_for(*w, rpn_);
    for (int d = 1; d < p; d *= 2) e.hop(((r - d) % p + p) % p, static_cast<std::uint64_t>(std::min(d, p - d) * n * 4));
    expect_bytes(last_record(*w), e.bytes, "bruck all_gather");
  }
  {  // Direct reduce-scatter: block q straight to rank q, in the dtype.
    Buffer in(DType::bf16, n * p), out(DType::bf16, n);
    w->reduce_scatter(in.cview(), out.view(), ReduceOp::max, StreamRef::host());
    Expect e = expect_for(*w, rpn_);
    for (int q = 0; q < p; ++q)
      if (q != r) e.hop(q, static_cast<std::uint64_t>(n * 2));
    expect_bytes(last_record(*w), e.bytes, "direct reduce_scatter");
  }
  {  // Recursive doubling (2, 4, 8 ranks: powers of two): the full fp32 accumulator to rank ^ 2^k.
    Buffer buf(DType::bf16, n);
    w->all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
    if ((p & (p - 1)) == 0) {
      Expect e = expect_for(*w, rpn_);
      for (int d = 1; d < p; d *= 2) e.hop(r ^ d, static_cast<std::uint64_t>(n * 4));
      expect_bytes(last_record(*w), e.bytes, "recursive doubling all_reduce");
    }
  }
}

TEST_P(MpiCounters, AllToAllBroadcastBarrierSendRecv) {
  auto w = world(0);
  const int p = w->size(), r = w->rank();
  const std::int64_t n = 5;  // per destination
  {
    Buffer in(DType::f32, n * p), out(DType::f32, n * p);
    w->all_to_all(in.cview(), out.view(), StreamRef::host());
    Expect e = expect_for(*w, rpn_);
    for (int q = 0; q < p; ++q)
      if (q != r) e.hop(q, static_cast<std::uint64_t>(n * 4));
    expect_bytes(last_record(*w), e.bytes, "pairwise all_to_all");
  }
  {  // Binomial tree from root 1 % p: relative rank v sends to v + 2^k for every 2^k > v.
    const int root = 1 % p;
    Buffer buf(DType::bf16, 9);
    w->broadcast(buf.view(), root, StreamRef::host());
    Expect e = expect_for(*w, rpn_);
    const int v = (r - root + p) % p;
    for (int d = 1; d < p; d *= 2)
      if (v < d && v + d < p) e.hop((v + d + root) % p, 9 * 2);
    const CallRecord rec = last_record(*w);
    expect_bytes(rec, e.bytes, "binomial broadcast");
    EXPECT_EQ(rec.peer, root);
  }
  {
    w->barrier();
    expect_bytes(last_record(*w), Bytes{}, "barrier");
  }
  if (p >= 2) {
    Buffer buf(DType::f32, 8);
    if (r == 0) {
      w->send(buf.cview(), p - 1, 3, StreamRef::host());
      Expect e = expect_for(*w, rpn_);
      e.hop(p - 1, 32);
      expect_bytes(last_record(*w), e.bytes, "send");
    } else if (r == p - 1) {
      w->recv(buf.view(), 0, 3, StreamRef::host());
      expect_bytes(last_record(*w), Bytes{}, "recv (bytes are counted by the sender)");
    }
  }
}

// A group made by split keeps the world ranks of its members, so its hops are classified by the
// world's nodes: with virtual nodes of 2, the even ranks' group crosses nodes on every hop.
TEST_P(MpiCounters, SplitGroupsClassifyHopsByWorldNodes) {
  if (rpn_ != 2) GTEST_SKIP() << "needs virtual nodes of 2";
  HZP_REQUIRE_MIN_RANKS(4);
  auto w = world(0);
  const int r = w->rank();
  for (bool strided : {true, false}) {
    // strided: {0, 2, 4, ..}, {1, 3, ..} (one rank per node); else {0, 1}, {2, 3}, .. (one node each)
    auto sub = w->split(strided ? r % 2 : r / 2, r, strided ? "strided" : "node");
    const int sp = sub->size();
    const std::int64_t n = 10;
    Buffer in(DType::f32, n), out(DType::f32, n * sp);
    sub->all_gather(in.cview(), out.view(), StreamRef::host());
    const std::uint64_t b = static_cast<std::uint64_t>((sp - 1) * n * 4);
    const CallRecord rec = last_record(*sub);
    expect_bytes(rec, strided ? Bytes{0, b} : Bytes{b, 0}, strided ? "strided group" : "node group");
    EXPECT_EQ(sub->counters().group_name(rec.group), strided ? "strided" : "node");
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, MpiCounters, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("one_machine_node") : std::string("virtual_nodes_of_2");
                         });

TEST(MpiCountersAggregates, SnapshotDeltaAndSharing) {
  MpiCommConfig c = test_config();
  c.small_message_bytes = 0;
  auto w = make_world(c);
  const int p = w->size();
  const std::int64_t n = 4;
  Buffer in(DType::f32, n), out(DType::f32, n * p);
  w->all_gather(in.cview(), out.view(), StreamRef::host());
  const CounterSnapshot s0 = w->counters().snapshot();
  EXPECT_EQ(s0.calls(), 1u);

  auto shared = w->duplicate("background", /*share_counters=*/true);
  auto apart = w->duplicate("apart", /*share_counters=*/false);
  for (int i = 0; i < 3; ++i) shared->all_gather(in.cview(), out.view(), StreamRef::host());
  apart->all_gather(in.cview(), out.view(), StreamRef::host());

  const CounterSnapshot d = w->counters().delta(s0);
  EXPECT_EQ(d.calls(), 3u);
  ASSERT_EQ(d.records.size(), 3u);
  const std::uint64_t per_call = static_cast<std::uint64_t>((p - 1) * n * 4);
  EXPECT_EQ(d.total("background", CollOp::all_gather).calls, 3u);
  EXPECT_EQ(d.total("world", CollOp::all_gather).calls, 0u);
  EXPECT_EQ(d.level(CollOp::all_gather, LinkLevel::intra).bytes, 3 * per_call);
  EXPECT_EQ(d.bytes(LinkLevel::inter), 0u);
  // Sequence numbers count per communicator.
  EXPECT_EQ(d.records[0].seq, 0u);
  EXPECT_EQ(d.records[2].seq, 2u);
  EXPECT_EQ(apart->counters().snapshot().calls(), 1u);
  const CounterSnapshot all = w->counters().snapshot();
  EXPECT_EQ(all.total(CollOp::all_gather).calls, 4u);
  EXPECT_EQ(all.total(CollOp::all_gather).elements, 4 * n);
}

TEST(MpiCountersAggregates, JoinWaitSeesALatePeer) {
  HZP_REQUIRE_MIN_RANKS(2);
  auto w = make_world(test_config());
  const int p = w->size(), r = w->rank();
  hzp::test::run_then_barrier([] {});  // start together
  if (r == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(60));
  Buffer in(DType::f32, 3), out(DType::f32, 3 * p);
  double late_join = wall_seconds();
  w->all_gather(in.cview(), out.view(), StreamRef::host());
  MPI_Bcast(&late_join, 1, MPI_DOUBLE, p - 1, MPI_COMM_WORLD);
  const CallRecord rec = last_record(*w);
  // Every rank of a ring or Bruck exchange hears (transitively) from every other: the last join
  // is known everywhere, and the early ranks' wait is mostly waiting for it.
  EXPECT_GE(rec.last_join_s, late_join);
  if (r != p - 1) {
    EXPECT_GE(rec.join_wait_s, 0.040) << "wait " << rec.wait_s << " s";
    EXPECT_LE(rec.join_wait_s, rec.wait_s);
    EXPECT_NEAR(rec.join_wait_s + rec.transfer_wait_s, rec.wait_s, 1e-12);
  }
}

}  // namespace
}  // namespace hzp::coll::test
