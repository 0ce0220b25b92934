// Ring attention's exchanges settle in the context's request keeper (ContextOptions::requests) when it keeps, as on
// a GPU's stream, instead of the host waiting for them at the end of every pass. One process, the cp group a phantom
// world's of cp = 2 and 4 (its calls have no peers and finish as they start, so keeping them on the host stream is
// harmless here, as keeping them is on a GPU's stream): forced to keep, each block's forward leaves its cp − 1
// batches in the keeper and each backward its 2·cp − 1 (cp − 1 more under recompute), the embedding and the head
// none; the group's counters record none of them until complete(), then exactly test_llama_context_parallel's
// message count; loss and gradients are bitwise those of the blocking form (no keeper) and of a keeper that waits at
// once (which the ring leaves alone: nothing kept). A keeper on another stream than the pass's is refused by name.
#include <gtest/gtest.h>

#include <string>

#include "../support/throws_with.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/workloads/ring_attention.hpp"
#include "keeper_test_util.hpp"

namespace hzp::test {
namespace {

using Completion = coll::StreamOrderedRequests::Completion;

bool is_block(const workloads::Workload& model, int u) { return model.layout().unit(u).name.rfind("block.", 0) == 0; }

TEST(LlamaCpKeeper, RingAttentionsExchangesAreKeptUntilComplete) {
  for (const auto& [cp, rank] : {std::pair{2, 1}, std::pair{4, 2}})
    for (bool recompute : {false, true}) {
      auto world = coll::make_phantom_world(coll::Topology::virtual_nodes(cp, cp, rank), coll::MpiCommConfig{}, rank);
      const workloads::LlamaConfig cfg = shrunk_llama(true);
      const auto model = workloads::make_llama(cfg, workloads::Precision::fp64, {}, {}, {world.get()});
      ASSERT_NE(model->context_shard(), nullptr);
      const TokenBatch mb = random_sequences(2, model->local_seq_len(), cfg.vocab, 5);
      const double norm = 2.0 * static_cast<double>(cfg.seq_len);
      const std::string mode = "cp = " + std::to_string(cp) + " rank " + std::to_string(rank) +
                               (recompute ? " recompute" : "");

      const MicroBatchRun blocking = run_with_keeper(*model, *world, nullptr, mb, 2, norm, recompute);
      coll::StreamOrderedRequests at_once(StreamRef::host());
      const MicroBatchRun waited = run_with_keeper(*model, *world, &at_once, mb, 2, norm, recompute);
      coll::StreamOrderedRequests kept(StreamRef::host(), Completion::kept);
      const MicroBatchRun held = run_with_keeper(*model, *world, &kept, mb, 2, norm, recompute);

      // Requests (one per point-to-point batch) per block: forward cp − 1 (K and V passed on); backward cp − 1 K/V
      // batches and cp dK/dV batches (the last one the accumulators' hop home), plus the forward's again under
      // recompute. Records (one per send and per receive, test_llama_context_parallel's count): forward 4 (cp − 1),
      // backward 8 (cp − 1) + 4, recompute 4 (cp − 1) more.
      const std::size_t c = static_cast<std::size_t>(cp), fwd = c - 1, bwd = (c - 1) + c + (recompute ? c - 1 : 0);
      const std::uint64_t L = static_cast<std::uint64_t>(cfg.layers);
      const std::uint64_t records = L * (4 * (c - 1) + 8 * (c - 1) + 4 + (recompute ? 4 * (c - 1) : 0));
      std::size_t want = 0;
      const int units = model->layout().num_units();
      for (int u = 0; u < units; ++u) {
        want += is_block(*model, u) ? fwd : 0;
        EXPECT_EQ(held.kept_after_forward[static_cast<std::size_t>(u)], want)
            << mode << ": kept after unit " << u << "'s forward";
      }
      for (int u = units - 1; u >= 0; --u) {
        want += is_block(*model, u) ? bwd : 0;
        EXPECT_EQ(held.kept_after_backward[static_cast<std::size_t>(units - 1 - u)], want)
            << mode << ": kept after unit " << u << "'s backward";
      }
      EXPECT_EQ(held.kept_before_complete, static_cast<std::size_t>(L) * (fwd + bwd)) << mode;
      EXPECT_EQ(held.recorded_before_complete, 0u) << mode << ": a kept exchange is recorded when completed";
      EXPECT_EQ(held.recorded_after_complete, records) << mode;
      EXPECT_EQ(kept.kept(), 0u) << mode;

      EXPECT_EQ(blocking.recorded_before_complete, records) << mode << ": the blocking form waits in each pass";
      EXPECT_EQ(waited.kept_before_complete, 0u) << mode << ": a keeper that waits at once keeps nothing";
      EXPECT_EQ(waited.recorded_before_complete, records) << mode;
      expect_bitwise(blocking, waited, mode + " (waited at once)");
      expect_bitwise(blocking, held, mode + " (kept)");
    }
}

// The context refuses a keeper of another stream itself (MicroBatchContext); the ring, a component of its own, too.
TEST(LlamaCpKeeper, RingAttentionRefusesAKeeperOfAnotherStream) {
  auto world = coll::make_phantom_world(coll::Topology::virtual_nodes(2, 2, 0), coll::MpiCommConfig{}, 0);
  HostBacking backing;
  CachingAllocator alloc(backing);
  const workloads::ContextShard shard(8, 2, 0);
  const workloads::RingAttentionDims dims{.batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 4};
  const std::int64_t L = shard.local_len();
  std::vector<double> q(static_cast<std::size_t>(L * 8)), kv(static_cast<std::size_t>(L * 4)), out = q,
      lse(static_cast<std::size_t>(2 * L));
  int elsewhere = 0;  // any address: a host "stream" other than the pass's, which complete() would synchronise
  coll::StreamOrderedRequests other(StreamRef::wrap(Device::cpu(), &elsewhere), Completion::kept);
  workloads::RingAttention ring(*world, shard, dims, DType::f64, alloc, nullptr, &other);
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        ring.forward(TensorView(out.data(), {L, 8}, DType::f64), TensorView(lse.data(), {1, 2, L}, DType::f64),
                     ConstTensorView(q.data(), {L, 8}, DType::f64), ConstTensorView(kv.data(), {L, 4}, DType::f64),
                     ConstTensorView(kv.data(), {L, 4}, DType::f64), StreamRef::host());
      },
      {"ring attention: the request keeper keeps requests on stream", "but the pass runs on stream",
       "give the ring the keeper of its compute stream"}));
  EXPECT_EQ(other.kept(), 0u);
}

}  // namespace
}  // namespace hzp::test
