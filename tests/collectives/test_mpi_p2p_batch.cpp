// Communicator::start_p2p_batch's default implementation over the MPI backend, at 2, 4 and 8 ranks (mpiexec,
// under the test config's 60 s deadline and CTest's timeout): a ring exchange where every rank puts its receive
// from the left BEFORE its send to the right in one batch (the order that deadlocks NCCL as separate calls) still
// completes, with the values the closed form gives; a block passed all the way round arrives from every rank; the
// counters hold exactly what the same messages started one by one record (calls, elements, bytes, peers, and the
// receives numbered first); an empty batch is done at once.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "hzp/collectives/counters.hpp"
#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

const StreamRef kHost = StreamRef::host();

/// Element i of rank r's block for tensor t: exact in fp32.
float value(int rank, int tensor, std::int64_t i) { return static_cast<float>(rank * 1000 + tensor * 100 + i); }

std::vector<float> block_of(int rank, int tensor, std::int64_t n) {
  std::vector<float> b(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) b[static_cast<std::size_t>(i)] = value(rank, tensor, i);
  return b;
}

TEST(MpiP2pBatch, RingExchangeReceivingFirstCompletes) {
  auto w = make_world(test_config());
  const int p = w->size(), r = w->rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  const std::int64_t n = 300;
  const std::vector<float> k = block_of(r, 0, n), v = block_of(r, 1, n);
  std::vector<float> k_in(static_cast<std::size_t>(n), -1.f), v_in(static_cast<std::size_t>(n), -1.f);
  const RecvOp recvs[] = {{TensorView(k_in.data(), {n}, DType::f32), prev, 10},
                          {TensorView(v_in.data(), {n}, DType::f32), prev, 11}};
  const SendOp sends[] = {{ConstTensorView(k.data(), {n}, DType::f32), next, 10},
                          {ConstTensorView(v.data(), {n}, DType::f32), next, 11}};
  Request req = w->start_p2p_batch(sends, recvs, kHost);
  req.wait();
  EXPECT_TRUE(req.done());
  EXPECT_EQ(k_in, block_of(prev, 0, n)) << "rank " << r << ": K from rank " << prev;
  EXPECT_EQ(v_in, block_of(prev, 1, n)) << "rank " << r << ": V from rank " << prev;
}

TEST(MpiP2pBatch, BlockPassedRoundTheRingVisitsEveryRank) {
  // Ring attention's pattern: each step receives the next block into one slot while the one in hand goes on,
  // completed together by wait_all (the batch polls its parts, so shared-memory transfers keep moving).
  auto w = make_world(test_config());
  const int p = w->size(), r = w->rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  const std::int64_t n = 64;
  std::vector<float> slot[2] = {block_of(r, 0, n), std::vector<float>(static_cast<std::size_t>(n))};
  std::vector<int> seen{static_cast<int>(slot[0][0]) / 1000};
  for (int step = 0; step + 1 < p; ++step) {
    std::vector<float>& hand = slot[step % 2];
    std::vector<float>& incoming = slot[(step + 1) % 2];
    const RecvOp recvs[] = {{TensorView(incoming.data(), {n}, DType::f32), prev, step}};
    const SendOp sends[] = {{ConstTensorView(hand.data(), {n}, DType::f32), next, step}};
    std::vector<Request> reqs;
    reqs.push_back(w->start_p2p_batch(sends, recvs, kHost));
    wait_all(reqs);
    const int from = (r - step - 1 + 2 * p) % p;  // the owner of the block that arrived
    EXPECT_EQ(incoming, block_of(from, 0, n)) << "rank " << r << " step " << step;
    seen.push_back(static_cast<int>(incoming[0]) / 1000);
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int> all(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) all[static_cast<std::size_t>(q)] = q;
  EXPECT_EQ(seen, all) << "rank " << r << " did not see every rank's block once";
}

TEST(MpiP2pBatch, CountsExactlyWhatSeparateCallsCount) {
  auto w = make_world(test_config());
  const int p = w->size(), r = w->rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  const std::int64_t n = 1000;  // above the small-message path's threshold or not: the same either way
  const std::vector<float> out = block_of(r, 0, n);
  std::vector<float> in(static_cast<std::size_t>(n));

  const CounterSnapshot s0 = w->counters().snapshot();
  {
    Request a = w->start_recv(TensorView(in.data(), {n}, DType::f32), prev, 1, kHost);
    Request b = w->start_send(ConstTensorView(out.data(), {n}, DType::f32), next, 1, kHost);
    std::vector<Request> reqs;
    reqs.push_back(std::move(a));
    reqs.push_back(std::move(b));
    wait_all(reqs);
  }
  const CounterSnapshot separate = w->counters().delta(s0);
  const CounterSnapshot s1 = w->counters().snapshot();
  const RecvOp recvs[] = {{TensorView(in.data(), {n}, DType::f32), prev, 2}};
  const SendOp sends[] = {{ConstTensorView(out.data(), {n}, DType::f32), next, 2}};
  w->start_p2p_batch(sends, recvs, kHost).wait();
  const CounterSnapshot batch = w->counters().delta(s1);
  EXPECT_EQ(in, block_of(prev, 0, n));

  for (const CollOp op : {CollOp::send, CollOp::recv}) {
    const OpTotals a = separate.total("world", op), b = batch.total("world", op);
    EXPECT_EQ(b.calls, 1u) << coll_op_name(op);
    EXPECT_EQ(b.calls, a.calls) << coll_op_name(op);
    EXPECT_EQ(b.elements, a.elements) << coll_op_name(op);
    for (int l = 0; l < kNumLinkLevels; ++l) EXPECT_EQ(b.level[l].bytes, a.level[l].bytes) << coll_op_name(op);
  }
  EXPECT_EQ(batch.calls(), 2u) << "the batch records its two messages and nothing else";
  // The receive was started first, so it holds the lower sequence number, as in the separate calls.
  ASSERT_EQ(batch.records.size(), 2u);
  const auto recv = std::find_if(batch.records.begin(), batch.records.end(),
                                 [](const CallRecord& c) { return c.op == CollOp::recv; });
  const auto send = std::find_if(batch.records.begin(), batch.records.end(),
                                 [](const CallRecord& c) { return c.op == CollOp::send; });
  ASSERT_TRUE(recv != batch.records.end() && send != batch.records.end());
  EXPECT_LT(recv->seq, send->seq);
  EXPECT_EQ(recv->peer, prev);
  EXPECT_EQ(send->peer, next);
}

TEST(MpiP2pBatch, EmptyBatchIsDoneAtOnce) {
  auto w = make_world(test_config());
  const CounterSnapshot s0 = w->counters().snapshot();
  Request req = w->start_p2p_batch({}, {}, kHost);
  EXPECT_TRUE(req.done());
  EXPECT_EQ(w->counters().delta(s0).calls(), 0u);
}

}  // namespace
}  // namespace hzp::coll::test
