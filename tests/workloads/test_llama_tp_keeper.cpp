// The tensor-parallel model's collectives settle in the context's request keeper (ContextOptions::requests). One
// process, the tp = 2 group a phantom world's (its calls have no peers and finish as they start, so keeping them
// on the host stream is harmless here, as keeping them is on a GPU's stream): forced to keep, the keeper holds
// every tp call of the micro-batch (the count against the closed form of test_llama_tensor_parallel), the group's
// counters record none of them until complete(), and loss and gradients are bitwise those of the blocking form
// (no keeper) and of a keeper that waits at once.
#include <gtest/gtest.h>

#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/collectives/topology.hpp"
#include "keeper_test_util.hpp"

namespace hzp::test {
namespace {

using Completion = coll::StreamOrderedRequests::Completion;

TEST(LlamaTpKeeper, TheModelsTpCollectivesAreKeptUntilComplete) {
  for (bool sp : {false, true}) {
    auto world = coll::make_phantom_world(coll::Topology::virtual_nodes(2, 2, 0), coll::MpiCommConfig{}, 0);
    workloads::LlamaConfig cfg = shrunk_llama(true);
    cfg.vocab = 12;  // divisible by tp = 2 (the ends are vocabulary-parallel)
    const auto model = workloads::make_llama(cfg, workloads::Precision::fp64, {.group = world.get(), .sequence_parallel = sp});
    const TokenBatch mb = random_sequences(2, cfg.seq_len, cfg.vocab, 5);
    const double norm = 2.0 * static_cast<double>(cfg.seq_len);
    const char* mode = sp ? "sequence-parallel" : "tp";

    const MicroBatchRun blocking = run_with_keeper(*model, *world, nullptr, mb, 2, norm);
    coll::StreamOrderedRequests at_once(StreamRef::host());
    const MicroBatchRun waited = run_with_keeper(*model, *world, &at_once, mb, 2, norm);
    coll::StreamOrderedRequests kept(StreamRef::host(), Completion::kept);
    const MicroBatchRun held = run_with_keeper(*model, *world, &kept, mb, 2, norm);

    // One micro-batch, L blocks (test_llama_tensor_parallel's closed forms): without sp, 4 all-reduces per block, the
    // embedding's and the head's, and the softmax's 2; with sp, 4 gathers and 4 scatters per block, 2 more of each
    // at the ends, 2L + 1 norm-weight all-reduces and the softmax's 2.
    const std::uint64_t L = static_cast<std::uint64_t>(cfg.layers);
    const std::uint64_t calls = sp ? (4 * L + 2) * 2 + (2 * L + 1) + 2 : 4 * L + 2 + 2;
    EXPECT_EQ(blocking.recorded_before_complete, calls) << mode;
    EXPECT_EQ(waited.recorded_before_complete, calls) << mode << ": a host keeper waits at once";
    EXPECT_EQ(held.kept_before_complete, calls) << mode << ": every tp call of the micro-batch kept";
    EXPECT_EQ(held.recorded_before_complete, 0u) << mode << ": a kept call is recorded when completed";
    EXPECT_EQ(held.recorded_after_complete, calls) << mode;
    EXPECT_EQ(kept.kept(), 0u);
    expect_bitwise(blocking, waited, mode);
    expect_bitwise(blocking, held, mode);
  }
}

}  // namespace
}  // namespace hzp::test
