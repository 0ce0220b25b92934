// The synthetic data source: sequences of a MarkovChain, started from its stationary distribution
// over k-grams, each sample a pure function of (seed, global index) through a counter-based RNG.
// It knows its own reference losses exactly (entropy rate, finite-context floor, unigram entropy).
#pragma once

#include <memory>

#include "hzp/workloads/data/markov_chain.hpp"
#include "hzp/workloads/data_source.hpp"

namespace hzp::workloads {

/// Sample i: u_t = uniform(fold(seed, "SAMPLE", i, t)); the first k tokens are the k-gram
/// π-CDF⁻¹(u_0) (its first T+1 tokens if T+1 < k), then x_t = successor-CDF⁻¹(u_t | x_{t−k..t−1}).
class MarkovSource final : public DataSource {
 public:
  /// `chain` may be shared (e.g. by training and validation sources); `seed` keys the samples
  /// (the factory passes the chain's own seed: the tag in the key keeps the draws unrelated).
  MarkovSource(std::shared_ptr<const MarkovChain> chain, std::int64_t seq_len, std::uint64_t seed);
  /// Builds the chain of `params` and samples with params.seed.
  MarkovSource(const MarkovChainParams& params, std::int64_t seq_len, const MarkovBuildOptions& options = {});

  std::int64_t vocab() const override { return chain_->vocab(); }
  std::int64_t seq_len() const override { return seq_len_; }
  const MarkovChain& chain() const { return *chain_; }
  std::uint64_t seed() const { return seed_; }

  /// Keys: kind=synthetic, generator, order, vocab, successors, concentration, seed (or
  /// table=explicit rows), seq_len, entropy_rate_nats, floor_nats, unigram_entropy_nats,
  /// stationary_iterations, stationary_residual_l1. Doubles printed round-trip exact.
  Provenance provenance() const override;
  std::optional<ReferenceLosses> reference_losses() const override;

 protected:
  void sample_unchecked(std::int64_t global_index, std::span<std::int32_t> tokens) const override;

 private:
  std::shared_ptr<const MarkovChain> chain_;
  std::int64_t seq_len_;
  std::uint64_t seed_;
};

}  // namespace hzp::workloads
