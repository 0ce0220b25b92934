// The Llama decoder under context parallelism, under mpiexec at 2 and 4 ranks (pairs of ranks form cp = 2 groups;
// at 4 ranks also one cp = 4 group, and cp = 2 × tp = 2 with and without sequence parallelism): each rank runs its
// ContextShard of every sequence (RoPE at the global positions, ring attention over the group) and two
// micro-batches of forward and backward give, summed over the cp group, the whole model's loss (run on every rank
// without communication: the independent reference) and its gradient at every element. fp64, tied and untied, with
// and without recompute. The cp group's messages are counted against a closed form and against what the model
// declares for the plan (llama_context_parallel_messages).
#include <cmath>
#include <string>
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

// The rank's share of every micro-batch's sequences.
std::vector<TokenBatch> shares(const std::vector<TokenBatch>& mbs, const workloads::ContextShard& shard,
                               std::int64_t micro_batch_size) {
  std::vector<TokenBatch> out;
  for (const TokenBatch& b : mbs) {
    TokenBatch s;
    s.inputs.resize(static_cast<std::size_t>(micro_batch_size * shard.local_len()));
    s.targets.resize(s.inputs.size());
    shard.take(b.inputs, s.inputs, micro_batch_size);
    shard.take(b.targets, s.targets, micro_batch_size);
    out.push_back(std::move(s));
  }
  return out;
}

void expect_context_parallel_matches(coll::Communicator& cp, coll::Communicator* tp, const workloads::LlamaConfig& cfg,
                                     bool recompute, bool sp) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  constexpr std::int64_t kMbs = 2;
  const auto mbs = split(random_sequences(4, cfg.seq_len, cfg.vocab, 21), kMbs, cfg.seq_len);
  const double norm = 4.0 * static_cast<double>(cfg.seq_len);
  const WholeModelReference ref = whole_model_reference(cfg, mbs, norm, recompute, alloc);

  const auto model = workloads::make_llama(cfg, Precision::fp64, {.group = tp, .sequence_parallel = sp}, {}, {&cp});
  ASSERT_NE(model->context_shard(), nullptr);
  const workloads::ContextShard& shard = *model->context_shard();
  EXPECT_EQ(shard.cp(), cp.size());
  EXPECT_EQ(shard.rank(), cp.rank());
  EXPECT_EQ(model->local_seq_len(), cfg.seq_len / cp.size());
  const workloads::ParamLayout& layout = model->layout();
  auto params = initial_params<double>(*model, 9);
  std::vector<double> grads(params.size(), -3.0);
  const coll::CounterSnapshot before = cp.counters().snapshot();
  double loss = run_micro_batches(*model, flat_view(params), flat_view(grads), shares(mbs, shard, kMbs), norm,
                                  recompute, alloc);
  const coll::CounterSnapshot d = cp.counters().delta(before);
  // The shares of the loss and of every weight's gradient add up over the group (what nd's engines sum).
  cp.all_reduce(TensorView(&loss, Shape{1}, DType::f64), coll::ReduceOp::sum, StreamRef::host());
  cp.all_reduce(flat_view(grads), coll::ReduceOp::sum, StreamRef::host());

  const int tpn = tp ? tp->size() : 1;
  const std::string label = std::string(cfg.tied_embeddings ? "tied" : "untied") + (recompute ? " recompute" : "") +
                            (sp ? " sequence-parallel" : "") + " cp=" + std::to_string(cp.size()) + " rank " +
                            std::to_string(cp.rank()) + " tp=" + std::to_string(tpn);
  EXPECT_NEAR(loss, ref.loss, 1e-12 * std::abs(ref.loss)) << label;
  const auto [worst, scale] = piece_gradient_difference(cfg, layout, grads, ref);
  EXPECT_LE(worst, 1e-11 * scale) << label << ": largest gradient difference " << worst << " (largest gradient " << scale << ")";

  // Ring attention's messages: per block and micro-batch (L blocks, 2 micro-batches), K and V passed on cp − 1
  // times forward; K, V, dK, dV cp − 1 times backward plus the accumulators' hop home; the forward's again under
  // recompute. Each message is one rank's K or V block: mbs · (T/cp) · (KV/tp) · D elements.
  const std::int64_t m = 2, L = cfg.layers, c = cp.size();
  const std::int64_t per_block = 2 * (c - 1) + 4 * (c - 1) + 2 + (recompute ? 2 * (c - 1) : 0);
  const std::int64_t elements = kMbs * (cfg.seq_len / c) * (cfg.kv_heads / tpn) * cfg.resolved_head_dim();
  const coll::OpTotals sent = d.total("cp", coll::CollOp::send), received = d.total("cp", coll::CollOp::recv);
  EXPECT_EQ(sent.calls, static_cast<std::uint64_t>(m * L * per_block)) << label;
  EXPECT_EQ(sent.elements, m * L * per_block * elements) << label;
  EXPECT_EQ(received.calls, sent.calls) << label;
  EXPECT_EQ(received.elements, sent.elements) << label;
  std::uint64_t on_cp = 0;
  for (int op = 0; op < coll::kNumCollOps; ++op) on_cp += d.total("cp", static_cast<coll::CollOp>(op)).calls;
  EXPECT_EQ(on_cp, sent.calls + received.calls) << label << ": the model calls nothing else on the cp group";

  // What the model declares for the plan is what it ran.
  const workloads::TensorParallelRun run{.tp = tpn, .cp = static_cast<int>(c), .sequence_parallel = sp,
                                         .recompute = recompute, .micro_batch_size = kMbs, .precision = Precision::fp64};
  std::int64_t declared = 0, declared_elements = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (bool backward : {false, true}) {
      const workloads::RingAttentionMessages msg = workloads::llama_context_parallel_messages(cfg, u, backward, run);
      declared += m * msg.sends;
      declared_elements += m * msg.sends * msg.elements;
    }
  EXPECT_EQ(static_cast<std::uint64_t>(declared), sent.calls) << label << ": declared vs run";
  EXPECT_EQ(declared_elements, sent.elements) << label << ": declared vs run";
}

TEST(LlamaContextParallel, SharesGiveTheWholeModelsLossAndGradients) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto pair = world->split(r / 2, r % 2, "cp");
  for (bool tied : {true, false})
    for (bool recompute : {false, true}) expect_context_parallel_matches(*pair, nullptr, shrunk_llama(tied), recompute, false);
  if (w % 4 == 0) {
    // cp = 4: T = 8 in 8 chunks of one token.
    auto quad = world->split(r / 4, r % 4, "cp");
    expect_context_parallel_matches(*quad, nullptr, shrunk_llama(true), false, false);
    expect_context_parallel_matches(*quad, nullptr, shrunk_llama(false), true, false);
    // cp = 2 × tp = 2: tp pairs of consecutive ranks, cp across them (the mesh's order).
    auto tp = world->split(r / 2, r % 2, "tp");
    auto cp = world->split((r / 4) * 2 + r % 2, (r % 4) / 2, "cp");
    workloads::LlamaConfig c = shrunk_llama(true);
    c.vocab = 12;  // the vocabulary-parallel ends need tp to divide it
    for (bool sp : {false, true}) expect_context_parallel_matches(*cp, tp.get(), c, sp, sp);
  }
}

// The plan's activation estimate on a rank of a cp group (activation_check.hpp): its share of every sequence's
// tokens, and the attention statistics over its local positions (ring attention's buffers are workspace and comm,
// outside the estimate). At 4 ranks also cp = 2 x tp = 2 with sequence parallelism.
TEST(LlamaContextParallel, ActivationEstimateMatchesTheAllocations) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto check = [&](coll::Communicator& cp, coll::Communicator* tp, const workloads::LlamaConfig& cfg, bool sp) {
    const auto spec = workloads::llama_spec(cfg);
    const auto model = workloads::make_llama(cfg, Precision::bf16_mixed, {.group = tp, .sequence_parallel = sp}, {},
                                             {.group = &cp});
    auto params = initial_params<bf16>(*model, 4);
    std::vector<float> grads(params.size());
    const int tpn = tp ? tp->size() : 1;
    for (bool recompute : {false, true}) {
      const TokenBatch whole = random_sequences(2, cfg.seq_len, cfg.vocab, 8);
      const workloads::TensorParallelRun run{.tp = tpn, .cp = cp.size(), .sequence_parallel = sp,
                                             .recompute = recompute, .micro_batch_size = 2,
                                             .precision = Precision::bf16_mixed};
      expect_activation_bytes_match(*spec, *model, run, flat_view(params), flat_view(grads),
                                    shares({whole}, *model->context_shard(), 2).front(),
                                    "cp=" + std::to_string(cp.size()) + " tp=" + std::to_string(tpn) +
                                        (sp ? " sequence-parallel" : "") + (recompute ? " recompute" : ""));
    }
  };
  auto pair = world->split(r / 2, r % 2, "cp");
  check(*pair, nullptr, shrunk_llama(true), false);
  if (w % 4 == 0) {
    auto tp = world->split(r / 2, r % 2, "tp");
    auto cp = world->split((r / 4) * 2 + r % 2, (r % 4) / 2, "cp");
    workloads::LlamaConfig c = shrunk_llama(true);
    c.vocab = 12;
    check(*cp, tp.get(), c, true);
  }
}

TEST(LlamaContextParallel, RefusesASequenceTwoCpDoesNotDivide) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto pair = world->split(r / 2, r % 2, "cp");
  workloads::LlamaConfig c = shrunk_llama(true);
  c.seq_len = 6;  // 4 chunks do not divide 6 tokens
  EXPECT_TRUE(throws_with<ConfigError>([&] { (void)workloads::make_llama(c, Precision::fp64, {}, {}, {pair.get()}); },
                                       {"model.seq_len = 6", "2 · scheduler.cp = 4", "Fix:"}));
}

}  // namespace
}  // namespace hzp::test
