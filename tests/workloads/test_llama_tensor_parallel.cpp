// The Llama decoder under tensor parallelism (Megatron's layout), under mpiexec at 2 and 4 ranks (pairs of
// ranks form tp = 2 groups; at 4 ranks also one tp = 4 group on a model with 4 KV heads): each rank's pieces
// start from their slices of the whole model's tensors, and two micro-batches of forward and backward give
// the whole model's loss (run on every rank without communication: the independent reference) and, for
// every element of every piece, the whole model's gradient at that element. fp64, tied and untied, with and
// without recompute, with and without sequence parallelism. The tp group's collectives are counted against
// closed forms in the number of blocks, tokens, width and tp (see the comments at the checks).
#include <cmath>
#include <cstring>
#include <vector>

#include "activation_check.hpp"
#include "data_test_util.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "model_test_util.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

void expect_tensor_parallel_matches(coll::Communicator& tp, const workloads::LlamaConfig& cfg, bool recompute,
                                    bool sp) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto mbs = split(random_sequences(4, cfg.seq_len, cfg.vocab, 21), 2, cfg.seq_len);
  const double norm = 4.0 * static_cast<double>(cfg.seq_len);
  const WholeModelReference ref = whole_model_reference(cfg, mbs, norm, recompute, alloc);

  const auto model = workloads::make_llama(cfg, Precision::fp64, {.group = &tp, .sequence_parallel = sp});
  const workloads::ParamLayout& layout = model->layout();
  auto params = initial_params<double>(*model, 9);  // each piece from the unsharded model's numbering
  std::vector<double> grads(params.size(), -3.0);
  const coll::CounterSnapshot before = tp.counters().snapshot();
  const double loss = run_micro_batches(*model, flat_view(params), flat_view(grads), mbs, norm, recompute, alloc);
  const coll::CounterSnapshot d = tp.counters().delta(before);

  const std::string label = std::string(cfg.tied_embeddings ? "tied" : "untied") + (recompute ? " recompute" : "") +
                            (sp ? " sequence-parallel" : "") +
                            " tp=" + std::to_string(tp.size()) + " rank " + std::to_string(tp.rank());
  // The sums over the group add the heads' (and the MLP's) shares in another order than one matmul does.
  EXPECT_NEAR(loss, ref.loss, 1e-12 * std::abs(ref.loss)) << label;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const workloads::ParamTensor& p : layout.unit(u).tensors)
      EXPECT_EQ(p.shard.sharded() ? p.shard.count : 1, p.shard.sharded() ? tp.size() : 1) << p.name;
  const auto [worst, scale] = piece_gradient_difference(cfg, layout, grads, ref);
  EXPECT_LE(worst, 1e-11 * scale) << label << ": largest gradient difference " << worst << " (largest gradient " << scale << ")";

  // Per micro-batch (2 of them), of tokens N = 2T and width d, with L blocks:
  const std::int64_t m = 2, L = cfg.layers, n = 2 * cfg.seq_len, dm = cfg.hidden, tpn = tp.size();
  const coll::OpTotals ar = d.total("tp", coll::CollOp::all_reduce), ag = d.total("tp", coll::CollOp::all_gather),
                       rs = d.total("tp", coll::CollOp::reduce_scatter);
  // Both ends are vocabulary-parallel: the embedding's partial lookups are summed like a row-parallel output,
  // the LM head's input gradient like a column-parallel input's, and the softmax takes two all-reduces per
  // micro-batch: the row maxima (N) and the sums of exponentials with the target logits (2N).
  const std::int64_t softmax_calls = 2, softmax_elements = 3 * n;
  if (!sp) {
    // 2 all-reduces of N x d per block forward, 2 in backward, and the attention's again under recompute; the
    // embedding's forward and the head's backward one each.
    const std::int64_t sums = L * (recompute ? 5 : 4) + 2;
    EXPECT_EQ(ar.calls, static_cast<std::uint64_t>(m * (sums + softmax_calls))) << label;
    EXPECT_EQ(ar.elements, m * (sums * n * dm + softmax_elements)) << label;
    EXPECT_EQ(ag.calls + rs.calls, 0u) << label;
  } else {
    // Per block 4 all-gathers of the N/tp x d rows (2 forward, 2 backward) and 4 reduce-scatters of N x d,
    // plus the recompute's 2 gathers and 1 reduce-scatter; the embedding's backward and the head's forward
    // gather once each (and the head's recompute once more); the embedding's forward and the head's backward
    // reduce-scatter once each; the norm weights' gradients are summed (d elements each): two per block and
    // the final norm's.
    const std::int64_t gathers = L * (recompute ? 6 : 4) + 2 + (recompute ? 1 : 0),
                       scatters = L * (recompute ? 5 : 4) + 2;
    EXPECT_EQ(ag.calls, static_cast<std::uint64_t>(m * gathers)) << label;
    EXPECT_EQ(ag.elements, m * gathers * (n / tpn) * dm) << label;
    EXPECT_EQ(rs.calls, static_cast<std::uint64_t>(m * scatters)) << label;
    EXPECT_EQ(rs.elements, m * scatters * n * dm) << label;
    EXPECT_EQ(ar.calls, static_cast<std::uint64_t>(m * (2 * L + 1 + softmax_calls))) << label;
    EXPECT_EQ(ar.elements, m * ((2 * L + 1) * dm + softmax_elements)) << label;
  }
  EXPECT_EQ(d.calls(), ar.calls + ag.calls + rs.calls) << label << ": the model calls nothing else";

  // What the model declares for the plan (llama_tensor_parallel_calls) is what it ran, call for call.
  const workloads::TensorParallelRun run{.tp = static_cast<int>(tpn), .sequence_parallel = sp, .recompute = recompute,
                                         .micro_batch_size = 2, .precision = Precision::fp64};
  std::uint64_t calls[3] = {0, 0, 0};
  std::int64_t elements[3] = {0, 0, 0};
  const coll::CollOp ops[3] = {coll::CollOp::all_reduce, coll::CollOp::all_gather, coll::CollOp::reduce_scatter};
  for (int u = 0; u < layout.num_units(); ++u)
    for (bool backward : {false, true})
      for (const workloads::TensorParallelCall& c : workloads::llama_tensor_parallel_calls(cfg, u, backward, run))
        for (int k = 0; k < 3; ++k)
          if (c.op == ops[k]) {
            calls[k] += static_cast<std::uint64_t>(m * c.times);
            elements[k] += m * c.times * c.elements;
          }
  const coll::OpTotals* got[3] = {&ar, &ag, &rs};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(calls[k], got[k]->calls) << label << " " << coll::coll_op_name(ops[k]) << ": declared vs run";
    EXPECT_EQ(elements[k], got[k]->elements) << label << " " << coll::coll_op_name(ops[k]) << ": declared vs run";
  }
}

// The shrunk model with a vocabulary tp = 2 and 4 divide (its own 11 is prime: the ends split by vocabulary).
workloads::LlamaConfig tp_llama(bool tied) {
  workloads::LlamaConfig c = shrunk_llama(tied);
  c.vocab = 12;
  return c;
}

TEST(LlamaTensorParallel, PiecesGiveTheWholeModelsLossAndGradients) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto pair = world->split(r / 2, r % 2, "tp");
  for (bool sp : {false, true})
    for (bool tied : {true, false})
      for (bool recompute : {false, true}) expect_tensor_parallel_matches(*pair, tp_llama(tied), recompute, sp);
  if (w % 4 == 0) {
    auto quad = world->split(r / 4, r % 4, "tp");
    workloads::LlamaConfig four = tp_llama(true);
    four.kv_heads = 4;  // tp = 4 must divide the KV heads too
    expect_tensor_parallel_matches(*quad, four, false, false);
    expect_tensor_parallel_matches(*quad, four, true, true);
  }
}

// The plan's activation estimate on a rank of a tp group (activation_check.hpp): the rank's heads, MLP width and
// vocabulary columns, and its rows of the residual stream under sequence parallelism, with their gathers and
// reduce-scatters as transients. bf16-mixed, as the paper's layouts run.
TEST(LlamaTensorParallel, ActivationEstimateMatchesTheAllocations) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto pair = world->split(r / 2, r % 2, "tp");
  const workloads::LlamaConfig cfg = tp_llama(true);
  const auto spec = workloads::llama_spec(cfg);
  for (bool sp : {false, true}) {
    const auto model = workloads::make_llama(cfg, Precision::bf16_mixed, {.group = pair.get(), .sequence_parallel = sp});
    auto params = initial_params<bf16>(*model, 4);
    std::vector<float> grads(params.size());
    for (bool recompute : {false, true}) {
      const TokenBatch batch = random_sequences(2, cfg.seq_len, cfg.vocab, 8);
      const workloads::TensorParallelRun run{.tp = 2, .sequence_parallel = sp, .recompute = recompute,
                                             .micro_batch_size = 2, .precision = Precision::bf16_mixed};
      expect_activation_bytes_match(*spec, *model, run, flat_view(params), flat_view(grads), batch,
                                    std::string("tp=2") + (sp ? " sequence-parallel" : "") +
                                        (recompute ? " recompute" : ""));
    }
  }
}

TEST(LlamaTensorParallel, RefusesADegreeThatDoesNotDivideTheHeads) {
  workloads::LlamaConfig c = tp_llama(true);  // heads 4, kv_heads 2, ffn 24, vocab 12
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_layout(c, 4, 0); },
                                       {"tp = 4", "model.heads = 4", "model.kv_heads = 2", "model.ffn_hidden = 24"}));
  EXPECT_NO_THROW(workloads::llama_layout(c, 2, 1));
  // The vocabulary is split too, and not padded.
  c.vocab = 33;
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_layout(c, 2, 0); }, {"tp = 2", "model.vocab = 33"}));
}

}  // namespace
}  // namespace hzp::test
