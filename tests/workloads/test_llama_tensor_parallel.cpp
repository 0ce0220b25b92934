// The Llama decoder under tensor parallelism (Megatron's layout), under mpiexec at 2 and 4 ranks (pairs of
// ranks form tp = 2 groups; at 4 ranks also one tp = 4 group on a model with 4 KV heads): each rank's pieces
// start from their slices of the whole model's tensors, and two micro-batches of forward and backward give
// the whole model's loss (run on every rank without communication: the independent reference) and, for
// every element of every piece, the whole model's gradient at that element. fp64, tied and untied, with and
// without recompute. The tp group's all-reduces are counted against the closed form: 2 per block in forward
// and 2 in backward, each of tokens x d elements, plus 1 per block under recompute.
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

void expect_tensor_parallel_matches(coll::Communicator& tp, const workloads::LlamaConfig& cfg, bool recompute) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto mbs = split(random_sequences(4, cfg.seq_len, cfg.vocab, 21), 2, cfg.seq_len);
  const double norm = 4.0 * static_cast<double>(cfg.seq_len);
  const Reference ref = whole_model(cfg, mbs, norm, recompute, alloc);

  const auto model = workloads::make_llama(cfg, Precision::fp64, &tp);
  const workloads::ParamLayout& layout = model->layout();
  auto params = initial_params<double>(*model, 9);  // each piece from the unsharded model's numbering
  std::vector<double> grads(params.size(), -3.0);
  const coll::CounterSnapshot before = tp.counters().snapshot();
  const double loss = run_micro_batches(*model, flat_view(params), flat_view(grads), mbs, norm, recompute, alloc);
  const coll::CounterSnapshot d = tp.counters().delta(before);

  const std::string label = std::string(cfg.tied_embeddings ? "tied" : "untied") + (recompute ? " recompute" : "") +
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

  // 2 micro-batches x L blocks x (2 forward + 2 backward [+ 1 recompute]) all-reduces of tokens x d.
  const std::int64_t per_block = recompute ? 5 : 4;
  const coll::OpTotals ar = d.total("tp", coll::CollOp::all_reduce);
  EXPECT_EQ(ar.calls, static_cast<std::uint64_t>(2 * cfg.layers * per_block)) << label;
  EXPECT_EQ(ar.elements, 2 * cfg.layers * per_block * (2 * cfg.seq_len) * cfg.hidden) << label;
  EXPECT_EQ(d.calls(), ar.calls) << label << ": a tensor-parallel model calls nothing but these all-reduces";
}

TEST(LlamaTensorParallel, PiecesGiveTheWholeModelsLossAndGradients) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto pair = world->split(r / 2, r % 2, "tp");
  for (bool tied : {true, false})
    for (bool recompute : {false, true}) expect_tensor_parallel_matches(*pair, shrunk_llama(tied), recompute);
  if (w % 4 == 0) {
    auto quad = world->split(r / 4, r % 4, "tp");
    workloads::LlamaConfig four = shrunk_llama(true);
    four.kv_heads = 4;  // tp = 4 must divide the KV heads too
    expect_tensor_parallel_matches(*quad, four, false);
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
