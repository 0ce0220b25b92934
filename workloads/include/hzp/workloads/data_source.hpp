// The data-source contract of the workload layer (docs/data.md "The contract"): a source hands out
// sequences addressed by a *global sample index*, deterministic in that index alone, so that which
// rank asks, in which order, and at which world size never changes the data a step sees.
// Concrete sources: hzp/workloads/data/{markov_source,token_file}.hpp; the factory: data_config.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::workloads {

/// Key/value strings describing where the data came from, for the results file's root attributes
/// (docs/results-schema.md, `data.<key>`): kind, parameters, file path and content hash, token count.
/// Order is stable.
using Provenance = std::vector<std::pair<std::string, std::string>>;

/// Losses a run is judged against, in nats per target token, when the source knows them exactly.
struct ReferenceLosses {
  double entropy_rate = 0;     ///< h = Σ_c π(c)·H(P(·|c)): the per-token loss far from the start
  double floor = 0;            ///< (1/T)·Σ_{t=1..T} H(X_t | X_0..X_{t-1}): a perfect model's mean loss
  double unigram_entropy = 0;  ///< H(π₁): the loss of the best context-free (unigram) predictor
};

/// A deterministic source of token sequences.
///
/// Thread-safety: every member is const and safe to call concurrently from any thread.
/// Determinism: sample(i) depends only on i and on the source's construction arguments; never on
/// earlier calls, other indices, the calling thread, the rank or the world size.
class DataSource {
 public:
  virtual ~DataSource() = default;

  /// Every token lies in [0, vocab()).
  virtual std::int64_t vocab() const = 0;
  /// T: a sample holds T+1 tokens x[0..T]; inputs are x[0..T-1], targets x[1..T].
  virtual std::int64_t seq_len() const = 0;
  std::int64_t tokens_per_sample() const { return seq_len() + 1; }

  /// Fills `tokens` (out, exactly seq_len()+1 entries) with sample `global_index` (≥ 0).
  /// Throws PreconditionError on a wrong span size or a negative index, DataError on bad data
  /// (e.g. a token in a file that is ≥ vocab()).
  void sample(std::int64_t global_index, std::span<std::int32_t> tokens) const {
    HZP_CHECK(global_index >= 0, "sample index ", global_index, " is negative");
    HZP_CHECK(std::int64_t(tokens.size()) == seq_len() + 1, "a sample holds seq_len+1 = ", seq_len() + 1,
              " tokens, but the span holds ", tokens.size());
    sample_unchecked(global_index, tokens);
  }

  /// What the results file records about this source (see the concrete sources for the keys).
  virtual Provenance provenance() const = 0;

  /// Exact reference losses where the source knows its own distribution (the synthetic chain);
  /// nullopt for token files.
  virtual std::optional<ReferenceLosses> reference_losses() const { return std::nullopt; }

  /// The documents of sample `global_index` over its seq_len() input positions: their first positions, ascending,
  /// beginning with 0 (docs/data.md "Document packing"; attention stays inside a document). Deterministic in the
  /// index like the tokens. A source without packing: {0}, one document.
  virtual std::vector<std::int32_t> document_starts(std::int64_t global_index) const {
    (void)global_index;
    return {0};
  }
  /// Whether sequences hold several documents (data.packing = documents): the schedulers then hand attention the
  /// boundaries. False keeps the unpacked path exactly as it was.
  virtual bool packs_documents() const { return false; }

 protected:
  /// sample() after its checks: tokens.size() == seq_len()+1 and global_index ≥ 0 hold.
  virtual void sample_unchecked(std::int64_t global_index, std::span<std::int32_t> tokens) const = 0;
};

}  // namespace hzp::workloads
