// The synthetic source's samples: the exact floor and each per-position conditional entropy against
// Monte-Carlo estimates that score sampled sequences with the TRUE conditionals given the full
// prefix; empirical token frequencies against π; bitwise reproducibility independent of call order,
// other indices and threads; provenance.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "data_test_util.hpp"
#include "hzp/workloads/data/markov_source.hpp"
#include "markov_test_util.hpp"

namespace hzp::workloads {
namespace {

using test::markov_params;
using test::throws_with;

std::vector<std::int32_t> draw(const DataSource& src, std::int64_t i) {
  std::vector<std::int32_t> x(src.tokens_per_sample());
  src.sample(i, x);
  return x;
}

struct Moments {
  double sum = 0, sum_sq = 0;
  std::int64_t n = 0;
  void add(double x) { sum += x, sum_sq += x * x, ++n; }
  double mean() const { return sum / double(n); }
  double stderr_of_mean() const { return std::sqrt((sum_sq / double(n) - mean() * mean()) / double(n - 1)); }
};

// Scores N sampled sequences with −log P(x_t | x_0..x_{t−1}) under the chain's true conditionals and
// compares (a) each position's mean with its exact conditional entropy, (b) the per-sequence mean
// loss with the floor, each within 4.5 standard errors.
void monte_carlo_floor(const MarkovChainParams& p, std::int64_t T, std::int64_t n) {
  const MarkovSource src(p, T);
  const MarkovChain& ch = src.chain();
  std::vector<Moments> per_position(T + 1);
  Moments per_sequence;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto x = draw(src, i);
    double loss = 0;
    for (std::int64_t t = 1; t <= T; ++t) {
      const double prob = ch.conditional_prob(std::span(x).first(t), x[t]);
      ASSERT_GT(prob, 0.0) << "sample " << i << " position " << t << " has probability 0";
      per_position[t].add(-std::log(prob));
      loss -= std::log(prob);
    }
    per_sequence.add(loss / double(T));
  }
  for (std::int64_t t = 1; t <= T; ++t) {
    const double exact = ch.block_entropy(t + 1) - ch.block_entropy(t);  // H(X_t | X_<t)
    EXPECT_NEAR(per_position[t].mean(), exact, 4.5 * per_position[t].stderr_of_mean())
        << "order " << p.order << ", position " << t;
  }
  const double floor = src.reference_losses()->floor;
  EXPECT_NEAR(per_sequence.mean(), floor, 4.5 * per_sequence.stderr_of_mean()) << "order " << p.order;
  std::cout << "[ info ] order " << p.order << " V=" << p.vocab << " s=" << p.successors << " T=" << T
            << ": floor " << floor << ", Monte-Carlo " << per_sequence.mean() << " ± "
            << per_sequence.stderr_of_mean() << ", entropy rate " << ch.entropy_rate() << ", unigram "
            << ch.unigram_entropy() << "\n";
}

TEST(MarkovSource, ExactFloorMatchesMonteCarloOrder1) {
  monte_carlo_floor(markov_params(1, 64, 4, 1.0, 101), 16, 20000);
}
TEST(MarkovSource, ExactFloorMatchesMonteCarloOrder2) {
  monte_carlo_floor(markov_params(2, 16, 4, 1.0, 102), 8, 40000);
}
TEST(MarkovSource, ExactFloorMatchesMonteCarloOrder3) {
  monte_carlo_floor(markov_params(3, 6, 3, 0.5, 103), 8, 40000);
}

// Every position of a stationary process has marginal π₁; position 0 and position T of independent
// samples are each multinomial(N, π₁). Per-token 5σ bounds, and a chi-square bound.
void check_unigram(const MarkovChainParams& p, std::int64_t T, std::int64_t n) {
  const MarkovSource src(p, T);
  const auto pi1 = src.chain().marginal(1);
  for (std::int64_t pos : {std::int64_t{0}, T}) {
    std::vector<std::int64_t> count(p.vocab, 0);
    for (std::int64_t i = 0; i < n; ++i) ++count[draw(src, i)[pos]];
    double chi2 = 0;
    std::int64_t df = -1;
    for (std::int64_t x = 0; x < p.vocab; ++x) {
      const double e = pi1[x] * double(n);
      if (pi1[x] < 1e-12) {
        EXPECT_EQ(count[x], 0) << "token " << x << " has stationary probability " << pi1[x];
        continue;
      }
      EXPECT_NEAR(double(count[x]), e, 5 * std::sqrt(e * (1 - pi1[x])) + 1)
          << "token " << x << " pos " << pos;
      chi2 += (count[x] - e) * (count[x] - e) / e;
      ++df;
    }
    EXPECT_LT(chi2, df + 6 * std::sqrt(2.0 * df)) << "position " << pos;
  }
}

TEST(MarkovSource, EmpiricalUnigramMatchesStationaryOrder1) {
  check_unigram(markov_params(1, 32, 4, 1.0, 201), 16, 40000);
}
TEST(MarkovSource, EmpiricalUnigramMatchesStationaryOrder2) {
  check_unigram(markov_params(2, 12, 3, 1.0, 202), 16, 40000);
}

TEST(MarkovSource, TransitionsFollowTheTable) {
  const MarkovSource src(markov_params(2, 16, 3, 1.0, 301), 64);
  for (std::int64_t i = 0; i < 200; ++i) {
    const auto x = draw(src, i);
    for (std::size_t t = 2; t < x.size(); ++t)
      ASSERT_GT(src.chain().transition_prob(src.chain().context_index(std::span(x).subspan(t - 2, 2)), x[t]),
                0.0);
  }
}

TEST(MarkovSource, SampleIsBitwiseReproducibleAndOrderIndependent) {
  const auto p = markov_params(2, 16, 4, 1.0, 401);
  const MarkovSource a(p, 32), b(p, 32);
  std::vector<std::int64_t> idx(300);
  for (std::size_t j = 0; j < idx.size(); ++j) idx[j] = std::int64_t(j) * 7919 % 100003;
  std::map<std::int64_t, std::vector<std::int32_t>> forward;
  for (auto i : idx) forward[i] = draw(a, i);
  // Another instance, reversed, interleaved with unrelated indices: the same sequences.
  std::reverse(idx.begin(), idx.end());
  for (auto i : idx) {
    draw(b, i + 1000000);
    EXPECT_EQ(draw(b, i), forward[i]) << "index " << i;
  }
  // Shuffled across two threads.
  std::shuffle(idx.begin(), idx.end(), std::mt19937(7));
  std::vector<std::vector<std::int32_t>> got(idx.size());
  auto work = [&](std::size_t start) {
    for (std::size_t j = start; j < idx.size(); j += 2) got[j] = draw(a, idx[j]);
  };
  std::thread t1(work, 0), t2(work, 1);
  t1.join();
  t2.join();
  for (std::size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(got[j], forward[idx[j]]);
  // Sample i depends on i: different indices give different sequences (over 300, no duplicates).
  std::set<std::vector<std::int32_t>> distinct;
  for (auto& [i, x] : forward) distinct.insert(x);
  EXPECT_EQ(distinct.size(), forward.size());
  // Another seed gives other data.
  const MarkovSource c(markov_params(2, 16, 4, 1.0, 402), 32);
  EXPECT_NE(draw(c, 5), forward.begin()->second);
}

TEST(MarkovSource, ShorterSeqLenIsAPrefixWhenOrderIsCovered) {
  // Position t's draw is keyed by (seed, i, t): the first T'+1 tokens do not depend on T.
  const auto p = markov_params(1, 64, 4, 1.0, 501);
  const MarkovSource long_src(p, 64), short_src(p, 16);
  for (std::int64_t i : {0, 9, 123456789}) {
    const auto a = draw(long_src, i), b = draw(short_src, i);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));
  }
}

TEST(MarkovSource, ProvenanceAndReferenceLosses) {
  const MarkovSource src(markov_params(2, 16, 4, 0.5, 601), 64);
  const auto prov = src.provenance();
  std::map<std::string, std::string> m(prov.begin(), prov.end());
  EXPECT_EQ(m["kind"], "synthetic");
  EXPECT_EQ(m["order"], "2");
  EXPECT_EQ(m["vocab"], "16");
  EXPECT_EQ(m["successors"], "4");
  EXPECT_EQ(m["concentration"], "0.5");
  EXPECT_EQ(m["seed"], "601");
  EXPECT_EQ(m["seq_len"], "64");
  const auto ref = src.reference_losses();
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(std::stod(m["floor_nats"]), ref->floor);  // printed round-trip exact
  EXPECT_EQ(std::stod(m["entropy_rate_nats"]), ref->entropy_rate);
  EXPECT_EQ(std::stod(m["unigram_entropy_nats"]), ref->unigram_entropy);
  EXPECT_LT(ref->entropy_rate, ref->floor);
  EXPECT_LT(ref->floor, ref->unigram_entropy);
}

TEST(MarkovSource, ArgumentChecks) {
  const MarkovSource src(markov_params(1, 16, 4, 1.0, 701), 8);
  std::vector<std::int32_t> wrong(8);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { src.sample(0, wrong); }, {"seq_len+1 = 9", "holds 8"}));
  std::vector<std::int32_t> ok(9);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { src.sample(-1, ok); }, {"index -1"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { MarkovSource s(markov_params(1, 16, 4, 1.0, 1), 0); }, {"seq_len=0"}));
}

TEST(MarkovSource, BigVocabSamplesQuickly) {
  const MarkovSource src(markov_params(1, 128256, 4, 1.0, 42), 4096);
  std::vector<std::int32_t> x(4097);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 16; ++i) src.sample(i, x);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ info ] V=128256: 16 samples of 4097 tokens in " << secs * 1e3 << " ms\n";
  EXPECT_LT(secs, 2.0);
  for (std::int32_t t : x) EXPECT_TRUE(t >= 0 && t < 128256);
}

}  // namespace
}  // namespace hzp::workloads
