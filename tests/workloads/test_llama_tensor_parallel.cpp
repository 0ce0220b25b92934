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

#include "data_test_util.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "model_test_util.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

struct Reference {
  double loss = 0;
  std::vector<double> grads;  // the whole model's, flat
};

Reference whole_model(const workloads::LlamaConfig& cfg, const std::vector<TokenBatch>& mbs, double norm,
                      bool recompute, CachingAllocator& alloc) {
  const auto model = workloads::make_llama(cfg, Precision::fp64);
  auto params = initial_params<double>(*model, 9);
  Reference r;
  r.grads.assign(params.size(), 0.0);
  r.loss = run_micro_batches(*model, flat_view(params), flat_view(r.grads), mbs, norm, recompute, alloc);
  return r;
}

void expect_tensor_parallel_matches(coll::Communicator& tp, const workloads::LlamaConfig& cfg, bool recompute,
                                    bool sp) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto mbs = split(random_sequences(4, cfg.seq_len, cfg.vocab, 21), 2, cfg.seq_len);
  const double norm = 4.0 * static_cast<double>(cfg.seq_len);
  const Reference ref = whole_model(cfg, mbs, norm, recompute, alloc);

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
  const workloads::ParamLayout whole = workloads::llama_layout(cfg);
  double worst = 0, scale = 0;
  for (double g : ref.grads) scale = std::max(scale, std::abs(g));
  for (int u = 0; u < layout.num_units(); ++u)
    for (std::size_t t = 0; t < layout.unit(u).tensors.size(); ++t) {
      const workloads::ParamTensor& p = layout.unit(u).tensors[t];
      const std::int64_t base = p.shard.sharded() ? p.global_offset : whole.tensor_offset(u, static_cast<int>(t));
      EXPECT_EQ(p.shard.sharded() ? p.shard.count : 1, p.shard.sharded() ? tp.size() : 1) << p.name;
      for (std::int64_t i = 0; i < p.numel(); ++i) {
        const double got = grads[static_cast<std::size_t>(layout.tensor_offset(u, static_cast<int>(t)) + i)];
        const double want = ref.grads[static_cast<std::size_t>(base + p.index_in_full(i))];
        worst = std::max(worst, std::abs(got - want));
      }
    }
  EXPECT_LE(worst, 1e-11 * scale) << label << ": largest gradient difference " << worst << " (largest gradient " << scale << ")";

  // Per micro-batch (2 of them), of tokens N = 2T and width d, with L blocks:
  const std::int64_t m = 2, L = cfg.layers, n = 2 * cfg.seq_len, dm = cfg.hidden, tpn = tp.size();
  const coll::OpTotals ar = d.total("tp", coll::CollOp::all_reduce), ag = d.total("tp", coll::CollOp::all_gather),
                       rs = d.total("tp", coll::CollOp::reduce_scatter);
  if (!sp) {
    // 2 all-reduces of N x d per block forward, 2 in backward, and the attention's again under recompute.
    const std::int64_t per_block = recompute ? 5 : 4;
    EXPECT_EQ(ar.calls, static_cast<std::uint64_t>(m * L * per_block)) << label;
    EXPECT_EQ(ar.elements, m * L * per_block * n * dm) << label;
    EXPECT_EQ(ag.calls + rs.calls, 0u) << label;
  } else {
    // Per block 4 all-gathers of the N/tp x d rows (2 forward, 2 backward) and 4 reduce-scatters of N x d,
    // plus the recompute's 2 gathers and 1 reduce-scatter; the embedding's backward and the head's forward
    // gather once each; the two norm weights' gradients are summed (d elements each) per block.
    const std::int64_t gathers = L * (recompute ? 6 : 4) + 2, scatters = L * (recompute ? 5 : 4);
    EXPECT_EQ(ag.calls, static_cast<std::uint64_t>(m * gathers)) << label;
    EXPECT_EQ(ag.elements, m * gathers * (n / tpn) * dm) << label;
    EXPECT_EQ(rs.calls, static_cast<std::uint64_t>(m * scatters)) << label;
    EXPECT_EQ(rs.elements, m * scatters * n * dm) << label;
    EXPECT_EQ(ar.calls, static_cast<std::uint64_t>(m * L * 2)) << label;
    EXPECT_EQ(ar.elements, m * L * 2 * dm) << label;
  }
  EXPECT_EQ(d.calls(), ar.calls + ag.calls + rs.calls) << label << ": the model calls nothing else";
}

TEST(LlamaTensorParallel, PiecesGiveTheWholeModelsLossAndGradients) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto pair = world->split(r / 2, r % 2, "tp");
  for (bool sp : {false, true})
    for (bool tied : {true, false})
      for (bool recompute : {false, true}) expect_tensor_parallel_matches(*pair, shrunk_llama(tied), recompute, sp);
  if (w % 4 == 0) {
    auto quad = world->split(r / 4, r % 4, "tp");
    workloads::LlamaConfig four = shrunk_llama(true);
    four.kv_heads = 4;  // tp = 4 must divide the KV heads too
    expect_tensor_parallel_matches(*quad, four, false, false);
    expect_tensor_parallel_matches(*quad, four, true, true);
  }
}

TEST(LlamaTensorParallel, RefusesADegreeThatDoesNotDivideTheHeads) {
  workloads::LlamaConfig c = shrunk_llama(true);  // heads 4, kv_heads 2, ffn 24
  EXPECT_TRUE(throws_with<ConfigError>([&] { workloads::llama_layout(c, 4, 0); },
                                       {"tp = 4", "model.heads = 4", "model.kv_heads = 2", "model.ffn_hidden = 24"}));
  EXPECT_NO_THROW(workloads::llama_layout(c, 2, 1));
}

}  // namespace
}  // namespace hzp::test
