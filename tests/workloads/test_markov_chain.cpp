// The synthetic chain's table and exact quantities: stationarity of π, entropies recomputed from
// the table by the test, hand-computable chains (deterministic cycles, uniform successors), the
// finite-context floor against its definition, size and convergence errors, and a big-vocabulary
// build (V = 128,256 and 155,136 at order 1).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>

#include "data_test_util.hpp"
#include "hzp/workloads/data/markov_chain.hpp"
#include "markov_test_util.hpp"

namespace hzp::workloads {
namespace {

using test::markov_params;
using test::throws_with;

// πP computed here from row() and the context-shift rule, independently of the library's iteration.
std::vector<double> apply_transition(const MarkovChain& ch, std::span<const double> pi) {
  const std::int64_t v = ch.vocab(), keep = ch.num_contexts() / v;
  std::vector<double> out(pi.size(), 0.0);
  for (std::int64_t c = 0; c < ch.num_contexts(); ++c) {
    const auto r = ch.row(c);
    for (std::size_t j = 0; j < r.successors.size(); ++j)
      out[(c % keep) * v + r.successors[j]] += pi[c] * r.probs[j];
  }
  return out;
}

double entropy(std::span<const double> p) {
  double h = 0;
  for (double x : p)
    if (x > 0) h -= x * std::log(x);
  return h;
}

class ChainShapes : public ::testing::TestWithParam<MarkovChainParams> {};

TEST_P(ChainShapes, StationaryDistributionIsStationary) {
  const MarkovChain ch(GetParam());
  const auto pi = ch.stationary();
  ASSERT_EQ(std::int64_t(pi.size()), ch.num_contexts());
  EXPECT_NEAR(std::accumulate(pi.begin(), pi.end(), 0.0), 1.0, 1e-12);
  const auto next = apply_transition(ch, pi);
  double l1 = 0, worst = 0;
  for (std::size_t c = 0; c < pi.size(); ++c) {
    EXPECT_GE(pi[c], 0.0);
    l1 += std::abs(next[c] - pi[c]);
    worst = std::max(worst, std::abs(next[c] - pi[c]));
  }
  EXPECT_LE(l1, 1e-10) << ch.describe();
  EXPECT_LE(worst, 1e-10);
  EXPECT_GT(ch.stationary_iterations(), 0);
  EXPECT_LE(ch.stationary_residual(), 1e-12);
}

TEST_P(ChainShapes, RowsHaveSSortedSuccessorsSummingToOne) {
  const auto p = GetParam();
  const MarkovChain ch(p);
  for (std::int64_t c = 0; c < ch.num_contexts(); ++c) {
    const auto r = ch.row(c);
    ASSERT_EQ(std::int64_t(r.successors.size()), p.successors);
    EXPECT_TRUE(std::is_sorted(r.successors.begin(), r.successors.end()));
    EXPECT_EQ(std::adjacent_find(r.successors.begin(), r.successors.end()), r.successors.end());
    EXPECT_NEAR(std::accumulate(r.probs.begin(), r.probs.end(), 0.0), 1.0, 1e-12);
    for (std::int32_t x : r.successors) EXPECT_TRUE(x >= 0 && x < p.vocab);
  }
}

TEST_P(ChainShapes, EntropiesMatchTheirDefinitions) {
  const MarkovChain ch(GetParam());
  const int k = ch.order();
  const auto pi = ch.stationary();
  double h = 0;
  for (std::int64_t c = 0; c < ch.num_contexts(); ++c) h += pi[c] * entropy(ch.row(c).probs);
  EXPECT_NEAR(ch.entropy_rate(), h, 1e-12);
  // Unigram marginal of the *last* token of the k-gram: equals π₁ (marginal of the first) by stationarity.
  std::vector<double> last(ch.vocab(), 0.0);
  for (std::int64_t c = 0; c < ch.num_contexts(); ++c) last[c % ch.vocab()] += pi[c];
  const auto first = ch.marginal(1);
  for (std::int64_t x = 0; x < ch.vocab(); ++x) EXPECT_NEAR(first[x], last[x], 1e-10);
  EXPECT_NEAR(ch.unigram_entropy(), entropy(first), 1e-12);
  // The floor against its definition (1/T)·Σ_t H(X_t | X_<t), the terms t < k from π's marginals.
  for (std::int64_t T : {1, 2, 3, 7, 64}) {
    double sum = 0;
    for (std::int64_t t = 1; t <= T; ++t) {
      if (t >= k) {
        sum += h;
        continue;
      }
      // H(X_t | X_0..X_{t-1}) = Σ π_{t+1}(a, x) · −log(π_{t+1}(a, x) / π_t(a)).
      const auto up = ch.marginal(int(t) + 1), down = ch.marginal(int(t));
      for (std::size_t i = 0; i < up.size(); ++i)
        if (up[i] > 0) sum -= up[i] * std::log(up[i] / down[i / ch.vocab()]);
    }
    EXPECT_NEAR(ch.finite_context_floor(T), sum / double(T), 1e-12) << "T=" << T;
    EXPECT_GE(ch.finite_context_floor(T), h - 1e-12);
    EXPECT_LE(ch.finite_context_floor(T), ch.unigram_entropy() + 1e-12);
  }
  if (k >= 2) {
    EXPECT_GT(ch.finite_context_floor(4), ch.entropy_rate() + 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Data, ChainShapes,
                         ::testing::Values(markov_params(1, 64, 4, 1.0, 1), markov_params(1, 256, 8, 0.3, 2),
                                           markov_params(2, 16, 4, 1.0, 3), markov_params(2, 16, 3, 0.0, 4),
                                           markov_params(3, 8, 3, 0.7, 5), markov_params(1, 12, 12, 2.0, 6)));

TEST(MarkovChain, Order1FloorIsExactlyTheEntropyRate) {
  const MarkovChain ch(markov_params(1, 64, 4, 1.0, 11));
  for (std::int64_t T : {1, 5, 64, 4096}) EXPECT_EQ(ch.finite_context_floor(T), ch.entropy_rate()) << T;
  EXPECT_LT(ch.entropy_rate(), ch.unigram_entropy());
}

TEST(MarkovChain, FloorDecreasesTowardTheEntropyRate) {
  const MarkovChain ch(markov_params(2, 16, 4, 1.0, 12));
  double prev = ch.finite_context_floor(1);
  for (std::int64_t T = 2; T <= 256; T *= 2) {
    const double f = ch.finite_context_floor(T);
    EXPECT_LT(f, prev);
    prev = f;
  }
  EXPECT_NEAR(ch.finite_context_floor(1 << 20), ch.entropy_rate(), 1e-5);
  EXPECT_NEAR(ch.block_entropy(5), ch.block_entropy(2) + 3 * ch.entropy_rate(), 1e-12);
}

TEST(MarkovChain, UniformSuccessorsGiveLogS) {
  for (int order : {1, 2}) {
    const MarkovChain ch(markov_params(order, 16, 4, 0.0, 13));
    EXPECT_NEAR(ch.entropy_rate(), std::log(4.0), 1e-12) << "order " << order;
    for (double pr : ch.row(7).probs) EXPECT_EQ(pr, 0.25);
  }
}

TEST(MarkovChain, DeterministicCycleHasZeroEntropyRate) {
  // Order 1: c → c+1 mod 5. Periodic, yet the uniform start is stationary; h = floor = 0.
  MarkovChain::ExplicitRows rows(5);
  for (int c = 0; c < 5; ++c) rows[c] = {{(c + 1) % 5, 1.0}};
  const auto ch = MarkovChain::from_rows(1, 5, rows);
  EXPECT_EQ(ch.entropy_rate(), 0.0);
  EXPECT_EQ(ch.finite_context_floor(16), 0.0);
  EXPECT_NEAR(ch.unigram_entropy(), std::log(5.0), 1e-12);
  for (double p : ch.stationary()) EXPECT_NEAR(p, 0.2, 1e-14);

  // Order 2: (a, b) → b+1 mod 4. Pairs (b, b+1) are recurrent, the other 12 transient: π is
  // uniform on the 4 recurrent pairs, H_2 = H_1 = ln 4, so every conditional entropy is 0. The
  // transient pairs keep ~1e-13 of mass at the 1e-12 residual, worth p·log(1/p) ≈ 1e-11 of entropy.
  MarkovChain::ExplicitRows rows2(16);
  for (int c = 0; c < 16; ++c) rows2[c] = {{(c % 4 + 1) % 4, 1.0}};
  const auto ch2 = MarkovChain::from_rows(2, 4, rows2);
  EXPECT_NEAR(ch2.entropy_rate(), 0.0, 1e-10);
  EXPECT_NEAR(ch2.finite_context_floor(8), 0.0, 1e-10);
  EXPECT_NEAR(ch2.unigram_entropy(), std::log(4.0), 1e-12);
  for (int a = 0; a < 4; ++a) EXPECT_NEAR(ch2.stationary()[a * 4 + (a + 1) % 4], 0.25, 1e-12);
}

TEST(MarkovChain, HandComputedOrder2Floor) {
  // V = 2. After (a, b): repeat b with probability 3/4 if a == b, else with probability 1/2.
  // π over 00, 01, 10, 11 is (1/3, 1/6, 1/6, 1/3): π(00) = ¾π(00) + ½π(10), and by symmetry.
  MarkovChain::ExplicitRows rows(4);
  rows[0] = {{0, 0.75}, {1, 0.25}};
  rows[1] = {{0, 0.5}, {1, 0.5}};
  rows[2] = {{0, 0.5}, {1, 0.5}};
  rows[3] = {{0, 0.25}, {1, 0.75}};
  const auto ch = MarkovChain::from_rows(2, 2, rows);
  const double pi[4] = {1.0 / 3, 1.0 / 6, 1.0 / 6, 1.0 / 3};
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(ch.stationary()[c], pi[c], 1e-12);
  const double hb34 = -(0.75 * std::log(0.75) + 0.25 * std::log(0.25));
  const double h = (2.0 / 3) * hb34 + (1.0 / 3) * std::log(2.0);
  EXPECT_NEAR(ch.entropy_rate(), h, 1e-12);
  // X_0 uniform; P(X_1 = X_0) = 2/3, so H(X_1 | X_0) = H_b(1/3).
  const double h1 = -(std::log(1.0 / 3) / 3 + 2 * std::log(2.0 / 3) / 3);
  EXPECT_NEAR(ch.finite_context_floor(1), h1, 1e-12);
  EXPECT_NEAR(ch.finite_context_floor(10), (h1 + 9 * h) / 10, 1e-12);
  const std::int32_t x0[] = {0};
  EXPECT_NEAR(ch.conditional_prob(x0, 0), 2.0 / 3, 1e-12);
  const std::int32_t x01[] = {0, 1};
  EXPECT_EQ(ch.conditional_prob(x01, 1), 0.5);
  EXPECT_NEAR(ch.conditional_prob({}, 1), 0.5, 1e-12);
}

TEST(MarkovChain, SameParametersSameTableDifferentSeedDifferentTable) {
  const MarkovChain a(markov_params(2, 16, 4, 1.0, 21)), b(markov_params(2, 16, 4, 1.0, 21)),
      c(markov_params(2, 16, 4, 1.0, 22));
  bool differs = false;
  for (std::int64_t ctx = 0; ctx < a.num_contexts(); ++ctx) {
    const auto ra = a.row(ctx), rb = b.row(ctx), rc = c.row(ctx);
    EXPECT_TRUE(std::equal(ra.successors.begin(), ra.successors.end(), rb.successors.begin()));
    EXPECT_TRUE(std::equal(ra.probs.begin(), ra.probs.end(), rb.probs.begin()));  // bitwise
    differs |= !std::equal(ra.successors.begin(), ra.successors.end(), rc.successors.begin());
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.entropy_rate(), b.entropy_rate());
}

TEST(MarkovChain, SmallConcentrationStaysFinite) {
  const MarkovChain ch(markov_params(1, 64, 8, 0.01, 23));
  EXPECT_TRUE(std::isfinite(ch.entropy_rate()));
  EXPECT_GE(ch.entropy_rate(), 0.0);
  EXPECT_LT(ch.entropy_rate(), 0.5);  // Dirichlet(0.01) rows put nearly all mass on one successor
}

TEST(MarkovChain, InvalidParametersAreAllNamed) {
  EXPECT_TRUE(throws_with<ConfigError>([] { MarkovChain ch(markov_params(4, 8, 9, -1.0, 0)); },
                                       {"data.synthetic.order=4", "data.synthetic.successors=9",
                                        "data.synthetic.vocab=8", "data.synthetic.concentration=-1"}));
  EXPECT_TRUE(
      throws_with<ConfigError>([] { MarkovChain ch(markov_params(1, 1, 1, 1.0, 0)); }, {"data.synthetic.vocab=1"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { MarkovChain ch(markov_params(1, 8, 0, 1.0, 0)); },
                                       {"data.synthetic.successors=0"}));
}

TEST(MarkovChain, RefusesTablesOverTheMemoryBound) {
  EXPECT_TRUE(
      throws_with<ConfigError>([] { MarkovChain ch(markov_params(2, 155136, 4, 1.0, 0)); },
                               {"data.synthetic.vocab=155136", "data.synthetic.order=2",
                                "data.synthetic.successors=4", "bytes", "GiB", "bound of 1073741824"}));
  MarkovBuildOptions small;
  small.max_table_bytes = 1000;
  EXPECT_TRUE(throws_with<ConfigError>([&] { MarkovChain ch(markov_params(1, 64, 4, 1.0, 0), small); },
                                       {"data.synthetic.vocab=64", "bound of 1000 bytes"}));
}

// A cycle 0 → 1 → … → 48 → 0 fed by the transient token 49 → 0: from the uniform start the mass on
// the cycle is uneven and circulates; the lazy iteration evens it out only at rate cos(π/49).
MarkovChain::ExplicitRows slow_cycle() {
  MarkovChain::ExplicitRows rows(50);
  for (int c = 0; c < 49; ++c) rows[c] = {{(c + 1) % 49, 1.0}};
  rows[49] = {{0, 1.0}};
  return rows;
}

TEST(MarkovChain, NonConvergenceIsAnErrorNamingTheResidual) {
  MarkovBuildOptions o;
  o.stationary_max_iterations = 500;
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { MarkovChain::from_rows(1, 50, slow_cycle(), o); },
      {"did not converge", "after 500 power iterations", "tolerance 1e-12", "mixes too slowly"}));
}

TEST(MarkovChain, PeriodicChainConvergesWithEnoughIterations) {
  MarkovBuildOptions o;
  o.stationary_max_iterations = 200000;
  const auto ch = MarkovChain::from_rows(1, 50, slow_cycle(), o);
  for (int c = 0; c < 49; ++c) EXPECT_NEAR(ch.stationary()[c], 1.0 / 49, 1e-10);
  EXPECT_LT(ch.stationary()[49], 1e-12);
  EXPECT_EQ(ch.entropy_rate(), 0.0);
}

TEST(MarkovChain, ExplicitRowsAreValidated) {
  MarkovChain::ExplicitRows rows(2, {{0, 0.5}, {1, 0.5}});
  rows[1] = {{0, 0.5}, {1, 0.6}};
  EXPECT_TRUE(throws_with<DataError>([&] { MarkovChain::from_rows(1, 2, rows); }, {"row 1", "sum to 1.1"}));
  rows[1] = {{0, 0.5}, {0, 0.5}};
  EXPECT_TRUE(throws_with<DataError>([&] { MarkovChain::from_rows(1, 2, rows); }, {"row 1", "distinct"}));
  rows[1] = {{0, 0.5}, {2, 0.5}};
  EXPECT_TRUE(throws_with<DataError>([&] { MarkovChain::from_rows(1, 2, rows); }, {"token 2", "vocab=2"}));
  EXPECT_TRUE(throws_with<DataError>([&] { MarkovChain::from_rows(2, 2, rows); },
                                     {"2 rows", "need vocab^order = 4"}));
}

// The big presets use the synthetic source by default: order 1 over their full vocabularies.
void check_big_vocab(std::int64_t vocab, std::int64_t s) {
  const auto t0 = std::chrono::steady_clock::now();
  const MarkovChain ch(markov_params(1, vocab, s, 1.0, 42));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ info ] V=" << vocab << " order 1 s=" << s << ": built in " << secs << " s, "
            << ch.stationary_iterations() << " power iterations, " << ch.table_bytes() / 1e6
            << " MB, h=" << ch.entropy_rate() << ", H(unigram)=" << ch.unigram_entropy() << " nats\n";
  EXPECT_LT(secs, 10.0);
  const double floor = ch.finite_context_floor(4096);
  EXPECT_TRUE(std::isfinite(floor));
  EXPECT_GT(floor, 0.0);
  EXPECT_LT(floor, std::log(double(s)));
  EXPECT_GT(ch.unigram_entropy(), floor);
  EXPECT_LE(ch.stationary_residual(), 1e-12);
}

TEST(MarkovChain, BigVocab128256Order1BuildsQuickly) { check_big_vocab(128256, 4); }
TEST(MarkovChain, BigVocab155136Order1BuildsQuickly) { check_big_vocab(155136, 8); }

}  // namespace
}  // namespace hzp::workloads
