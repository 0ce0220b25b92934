// MarkovSource: the synthetic chain's sampler and its provenance. Each position's uniform is keyed
// by (seed, index, position), so sample(i) is bitwise the same whoever asks, whenever.
#include "hzp/workloads/data/markov_source.hpp"

#include <charconv>

#include "counter_rng.hpp"
#include "hzp/core/error.hpp"

namespace hzp::workloads {
namespace {

// Shortest round-trip text of a double, so the results file pins the exact value.
std::string exact(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

}  // namespace

MarkovSource::MarkovSource(std::shared_ptr<const MarkovChain> chain, std::int64_t seq_len, std::uint64_t seed)
    : chain_(std::move(chain)), seq_len_(seq_len), seed_(seed) {
  HZP_CHECK(chain_ != nullptr, "MarkovSource needs a chain");
  if (seq_len < 1) HZP_THROW(ConfigError, "synthetic data source: seq_len=", seq_len, " must be ≥ 1");
}

MarkovSource::MarkovSource(const MarkovChainParams& params, std::int64_t seq_len,
                           const MarkovBuildOptions& options)
    : MarkovSource(std::make_shared<const MarkovChain>(params, options), seq_len, params.seed) {}

void MarkovSource::sample_unchecked(std::int64_t global_index, std::span<std::int32_t> tokens) const {
  const MarkovChain& ch = *chain_;
  const std::int64_t k = ch.order(), v = ch.vocab(), n = std::int64_t(tokens.size());
  const std::uint64_t key = rng::fold(rng::fold(seed_, rng::kTagSample), std::uint64_t(global_index));

  // Start: one k-gram from π, decoded oldest token first.
  std::int64_t context = ch.sample_context(rng::unit(rng::fold(key, 0)));
  std::int64_t rest = context;
  for (std::int64_t i = k - 1; i >= 0; --i) {
    if (i < n) tokens[i] = std::int32_t(rest % v);
    rest /= v;
  }
  const std::int64_t keep = ch.num_contexts() / v;  // V^(k−1): what survives of a context's index
  for (std::int64_t t = k; t < n; ++t) {
    const std::int32_t x = ch.sample_successor(context, rng::unit(rng::fold(key, std::uint64_t(t))));
    tokens[t] = x;
    context = (context % keep) * v + x;
  }
}

Provenance MarkovSource::provenance() const {
  const MarkovChain& ch = *chain_;
  Provenance p{{"kind", "synthetic"}, {"generator", "hzp-markov-v1 (splitmix64 counter hash)"}};
  if (const auto& prm = ch.params()) {
    p.emplace_back("order", std::to_string(prm->order));
    p.emplace_back("vocab", std::to_string(prm->vocab));
    p.emplace_back("successors", std::to_string(prm->successors));
    p.emplace_back("concentration", exact(prm->concentration));
    p.emplace_back("seed", std::to_string(prm->seed));
  } else {
    p.emplace_back("table", "explicit rows");
    p.emplace_back("order", std::to_string(ch.order()));
    p.emplace_back("vocab", std::to_string(ch.vocab()));
  }
  p.emplace_back("sample_seed", std::to_string(seed_));
  p.emplace_back("seq_len", std::to_string(seq_len_));
  p.emplace_back("entropy_rate_nats", exact(ch.entropy_rate()));
  p.emplace_back("floor_nats", exact(ch.finite_context_floor(seq_len_)));
  p.emplace_back("unigram_entropy_nats", exact(ch.unigram_entropy()));
  p.emplace_back("stationary_iterations", std::to_string(ch.stationary_iterations()));
  p.emplace_back("stationary_residual_l1", exact(ch.stationary_residual()));
  return p;
}

std::optional<ReferenceLosses> MarkovSource::reference_losses() const {
  return ReferenceLosses{chain_->entropy_rate(), chain_->finite_context_floor(seq_len_),
                         chain_->unigram_entropy()};
}

}  // namespace hzp::workloads
