// Runs with document packing (data.packing = documents) against the single-rank `none` run with the same packed
// source, under mpiexec at 2 and 4 ranks, on `tiny` (T = 64) with short documents (mean 16 tokens, σ = 1, so
// sequences hold several, some shorter than a context-parallel chunk): zero3 and asynchzp (micro-batches with
// different documents on different ranks), nd with tensor parallelism (every tp rank masks the same documents),
// context parallelism (ring attention on global document starts, key blocks before a chunk's documents skipped)
// and pipeline stages (every stage masks). Loss and gradient norm to 1e-5 relative every step; the visible pairs
// the ranks report add up to none's (times the ranks that hold the same rows: tp · pp); and the pairs differ between
// data-parallel ranks, the load imbalance packing exists to show.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "data_parallel_test_util.hpp"
#include "hzp/workloads/data/packed_source.hpp"
#include "nd_test_util.hpp"

namespace hzp::test {
namespace {

using schedulers::SchedulerOptions;
using workloads::Precision;

struct PackCase {
  std::string scheduler;
  int tp = 1, cp = 1, pp = 1;
  std::string label() const {
    return scheduler + " tp=" + std::to_string(tp) + " cp=" + std::to_string(cp) + " pp=" + std::to_string(pp);
  }
  SchedulerOptions options() const {
    SchedulerOptions o;
    o.tp = tp;
    o.cp = cp;
    o.pp = pp;
    return o;
  }
};

std::vector<PackCase> cases_at(int w) {
  if (w == 2) return {{"zero3"}, {"asynchzp"}, {"nd", 2}, {"nd", 1, 2}, {"nd", 1, 1, 2}, {"asynchzp", 1, 2}};
  return {{"zero3"}, {"asynchzp"}, {"nd", 1, 4}, {"nd", 2, 2}, {"nd", 1, 2, 2}, {"nd", 2, 1, 2}};
}

/// TinySetup's chain with short documents packed into its sequences.
std::unique_ptr<workloads::PackedSource> packed(const TinySetup& s) {
  workloads::DocumentPacking p;
  p.kind = workloads::PackingKind::documents;
  p.mean_tokens = 16;
  p.sigma = 1.0;
  p.seed = 3;
  return std::make_unique<workloads::PackedSource>(
      std::make_unique<workloads::MarkovSource>(s.chain, s.model_config.seq_len), p);
}

TEST(PackingRuns, MatchNoneWithTheSameDocuments) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  auto world = make_world(world_size());
  const int w = world->size();
  if (w != 2 && w != 4) GTEST_SKIP() << "cases are laid out for 2 and 4 ranks";
  TinySetup ref(Precision::fp32);
  const auto ref_source = packed(ref);
  auto none = schedulers::make_scheduler("none", ref.args());
  constexpr int kSteps = 6;
  std::vector<schedulers::StepStats> want;
  for (int i = 0; i < kSteps; ++i) want.push_back(none->step({i, ref_source.get()}));

  for (const PackCase& c : cases_at(w)) {
    SCOPED_TRACE(c.label() + " W=" + std::to_string(w));
    NdRunSpec spec{c.options(), nullptr, false, false, 0, Precision::fp32, c.scheduler};
    NdRun run(*world, coll::Topology::virtual_nodes(w, w, world->rank()), spec);
    const auto source = packed(run.setup);
    bool imbalanced = false;
    for (int i = 0; i < kSteps; ++i) {
      const schedulers::StepStats got = run.scheduler->step({i, source.get()});
      EXPECT_LE(rel_diff(got.loss, want[static_cast<std::size_t>(i)].loss), 1e-5) << "step " << i << " loss";
      EXPECT_LE(rel_diff(got.grad_norm, want[static_cast<std::size_t>(i)].grad_norm), 1e-5) << "step " << i;
      // Every rank's visible pairs, gathered: they add up to the whole batch's once per tp and pp rank.
      std::vector<double> pairs(static_cast<std::size_t>(w));
      double mine = got.attention_pairs;
      world->all_gather(ConstTensorView(&mine, Shape{1}, DType::f64),
                        TensorView(pairs.data(), Shape{static_cast<std::int64_t>(w)}, DType::f64), StreamRef::host());
      double total = 0;
      for (double p : pairs) total += p;
      EXPECT_DOUBLE_EQ(total, want[static_cast<std::size_t>(i)].attention_pairs * c.tp * c.pp) << "step " << i;
      if (c.tp * c.cp * c.pp == 1 && *std::min_element(pairs.begin(), pairs.end()) != *std::max_element(pairs.begin(), pairs.end()))
        imbalanced = true;
    }
    if (c.tp * c.cp * c.pp == 1) {
      EXPECT_TRUE(imbalanced) << "data-parallel ranks never differed in attention pairs";
    }
  }
  // Without packing every sequence is one document: T(T+1)/2 pairs each, the check above's scale.
  const double T = static_cast<double>(ref.model_config.seq_len);
  EXPECT_LT(want[0].attention_pairs, static_cast<double>(ref.train.global_batch) * T * (T + 1) / 2);
}

}  // namespace
}  // namespace hzp::test
