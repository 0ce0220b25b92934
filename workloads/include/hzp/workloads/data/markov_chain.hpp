// A synthetic order-k Markov chain over a vocabulary: the sparse transition table (s successors per
// context with Dirichlet(α) weights, built from a seed by counter-based hashing), its stationary
// distribution over k-grams (lazy power iteration), and the exact entropies a perfect model's loss
// is judged against (entropy rate, finite-context floor, unigram entropy). Sampling sequences from
// it is markov_source.hpp's job. Derivations: docs/data.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hzp::workloads {

/// The `data.synthetic.*` keys. validate() throws ConfigError naming the keys and values.
struct MarkovChainParams {
  int order = 1;                ///< k ∈ [1, 3]: a context is the last k tokens (V^k contexts)
  std::int64_t vocab = 64;      ///< V ≥ 2 (and < 2^31: tokens are int32)
  std::int64_t successors = 4;  ///< s ∈ [1, V]: tokens with nonzero probability after each context
  double concentration = 1.0;   ///< α ≥ 0 of the Dirichlet over the s successors; 0 = equal probabilities
  std::uint64_t seed = 0;       ///< the table and the samples are functions of this seed alone

  void validate() const;
};

/// Limits for building a chain; defaults suit every preset (V = 155,136 at order 1 uses ~30 MB).
struct MarkovBuildOptions {
  /// Power iteration stops when ‖πP − π‖₁ ≤ this.
  double stationary_tolerance = 1e-12;
  /// …and fails (ConfigError) after this many iterations: a chain that mixes this slowly (e.g. a
  /// long deterministic cycle fed by a transient tail) has no usable stationary start.
  std::int64_t stationary_max_iterations = 10000;
  /// Refuse tables (transitions + stationary vectors) larger than this, naming V, k, s and the bytes.
  std::int64_t max_table_bytes = std::int64_t{1} << 30;
};

/// Thread-safety: immutable after construction; every const member may be called concurrently.
/// Context index of the k-gram (a_1..a_k), oldest first: Σ_i a_i·V^(k−i).
class MarkovChain {
 public:
  /// One context's transitions: successors ascending, probs[j] = P(successors[j] | context).
  struct Row {
    std::span<const std::int32_t> successors;
    std::span<const double> probs;
  };
  using ExplicitRows = std::vector<std::vector<std::pair<std::int32_t, double>>>;

  /// Builds the chain of `params` (validated; ConfigError if invalid, too large or not converging).
  explicit MarkovChain(const MarkovChainParams& params, const MarkovBuildOptions& options = {});

  /// A chain given row by row (hand-computable tests): rows[c] lists (token, probability) pairs for
  /// context c, rows.size() == vocab^order, tokens distinct and in [0, vocab), probabilities ≥ 0
  /// summing to 1 within 1e-9 (renormalised). DataError otherwise.
  static MarkovChain from_rows(int order, std::int64_t vocab, const ExplicitRows& rows,
                               const MarkovBuildOptions& options = {});

  int order() const { return order_; }
  std::int64_t vocab() const { return vocab_; }
  std::int64_t num_contexts() const { return static_cast<std::int64_t>(row_ptr_.size()) - 1; }
  /// The generating parameters; nullopt for a chain built from explicit rows.
  const std::optional<MarkovChainParams>& params() const { return params_; }

  Row row(std::int64_t context) const;
  /// Index of the k-gram `last_k` (size k, oldest first).
  std::int64_t context_index(std::span<const std::int32_t> last_k) const;
  /// P(next | context) from the table (0 when `next` is not a successor).
  double transition_prob(std::int64_t context, std::int32_t next) const;

  /// π over the V^k contexts: the stationary distribution of the k-gram chain.
  std::span<const double> stationary() const { return marginals_.back(); }
  /// π_m over V^m m-grams (m ∈ [1, k]), the stationary law of any m consecutive tokens (m = k: π).
  std::span<const double> marginal(int m) const;
  /// P(X_t = next | X_0..X_{t−1} = prefix), t = prefix.size() ≥ 0, for the process started from π:
  /// the table's row when t ≥ k; π_{t+1}(prefix, next) / π_t(prefix) when t < k (π₁(next) at t = 0).
  /// PreconditionError when the prefix has stationary probability 0.
  double conditional_prob(std::span<const std::int32_t> prefix, std::int32_t next) const;

  /// All in nats (per token where a rate).
  double entropy_rate() const { return entropy_rate_; }
  double unigram_entropy() const { return block_entropy_[0]; }
  /// H_m = H(X_0..X_{m−1}) under stationarity, any m ≥ 1 (H_m = H_k + (m−k)·h for m ≥ k).
  double block_entropy(std::int64_t m) const;
  /// (1/T)·Σ_{t=1..T} H(X_t | X_0..X_{t−1}) = (H_{T+1} − H_1)/T: the mean loss of a perfect model
  /// predicting targets x[1..T] from their prefixes, X_0.. drawn from π. Equals h for order 1.
  double finite_context_floor(std::int64_t seq_len) const;

  /// Power-iteration diagnostics, for provenance.
  std::int64_t stationary_iterations() const { return stationary_iterations_; }
  double stationary_residual() const { return stationary_residual_; }
  /// Bytes held by the table and the stationary vectors.
  std::int64_t table_bytes() const;

  /// Inverse-CDF draws used by the sampler: a context from π, and a successor of `context`, for a
  /// uniform u ∈ [0, 1). Never returns an outcome of probability 0.
  std::int64_t sample_context(double u) const;
  std::int32_t sample_successor(std::int64_t context, double u) const;

  /// "order=…, vocab=…, successors=…, concentration=…, seed=…" (or "explicit rows"), for messages.
  std::string describe() const;

 private:
  MarkovChain() = default;
  void finish(const MarkovBuildOptions& options);  // stationary, marginals, entropies, cdfs

  int order_ = 1;
  std::int64_t vocab_ = 0;
  std::optional<MarkovChainParams> params_;
  std::vector<std::int64_t> row_ptr_;  // CSR over contexts: row c is [row_ptr_[c], row_ptr_[c+1])
  std::vector<std::int32_t> succ_;
  std::vector<double> prob_;
  std::vector<double> cdf_;  // per row, inclusive prefix sums, the row's last entry exactly 1
  std::vector<std::vector<double>> marginals_;  // [m−1] = π_m, m = 1..k; back() = π
  std::vector<double> context_cdf_;             // prefix sums of π, exactly 1 from the last nonzero entry on
  std::vector<double> block_entropy_;           // [m−1] = H_m, m = 1..k
  double entropy_rate_ = 0;
  std::int64_t stationary_iterations_ = 0;
  double stationary_residual_ = 0;
};

/// Bytes a chain of these parameters would hold (what max_table_bytes is compared with); computed
/// in floating point so that huge V^k does not overflow.
double markov_table_bytes_estimate(int order, std::int64_t vocab, std::int64_t successors);

}  // namespace hzp::workloads
