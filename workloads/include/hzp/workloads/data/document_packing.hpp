// Document packing (`data.packing = documents`, docs/data.md "Document packing"): every sequence is cut into
// documents of variable length, and attention stays inside a document. This is what makes attention's cost differ
// between sequences, micro-batches and ranks in real pre-training data: a sequence that is one long document costs
// T²/2 visible pairs, one of many short documents far fewer. The boundaries are a pure function of (seed, sample
// index), like the tokens, so every rank and the simulator see the same documents for the same sample.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/enum_names.hpp"
#include "hzp/workloads/data_source.hpp"

namespace hzp::workloads {

/// `data.packing`.
enum class PackingKind { none, documents };
inline constexpr EnumName<PackingKind> kPackingKindNames[] = {{"none", PackingKind::none},
                                                              {"documents", PackingKind::documents}};
std::string_view to_string(PackingKind k);
/// A name of kPackingKindNames; ConfigError naming data.packing, the text and the choices.
PackingKind parse_packing_kind(std::string_view text);

/// Document lengths are log-normal: ln L ~ Normal(μ, σ²) with μ = ln(mean_tokens) − σ²/2, so that E[L] is
/// mean_tokens; rounded to the nearest integer and at least one token. Log-normal because document lengths of web
/// and code corpora are heavy-tailed with most mass at a few hundred tokens (an assumption stated in docs/data.md;
/// set σ to match a corpus). The first document of a sample continues one begun in the previous sample of the
/// stream: its remaining length is a uniform fraction (at least one token) of a fresh draw.
struct DocumentPacking {
  PackingKind kind = PackingKind::none;  ///< data.packing
  double mean_tokens = 1024;             ///< data.documents.mean_tokens: E[L] in tokens, ≥ 1
  double sigma = 1.0;                    ///< data.documents.sigma: σ of ln L, ≥ 0 (0: every document mean_tokens long)
  std::uint64_t seed = 0;                ///< data.documents.seed: keys the lengths (independent of the tokens' seed)

  /// ConfigError listing every problem, each naming its key, the value and the fix.
  void validate() const;
  bool enabled() const noexcept { return kind == PackingKind::documents; }

  /// The documents of sample `global_index` (≥ 0) over a sequence of `seq_len` input positions: their first
  /// positions, ascending, starts[0] = 0, every start < seq_len. Without packing: {0} (one document). Deterministic
  /// in (seed, global_index, seq_len) alone.
  std::vector<std::int32_t> starts(std::int64_t global_index, std::int64_t seq_len) const;

  /// Provenance keys for the results file: packing, and with documents packing_mean_tokens, packing_sigma,
  /// packing_seed, packing_distribution.
  Provenance provenance() const;
};

/// For each position t of a sequence with document `starts` over `seq_len` positions, the first position of its
/// document (the first key its query may see): out[t] = max{ s ∈ starts : s ≤ t }. PreconditionError unless starts
/// is ascending, begins with 0 and ends below seq_len, and out holds seq_len entries.
void document_first_positions(std::span<const std::int32_t> starts, std::int64_t seq_len,
                              std::span<std::int32_t> out);

/// The (query, key) pairs causal attention inside documents visits for query positions [row_begin, row_end):
/// Σ_t (t − first(t) + 1). With one document and the whole sequence this is T(T+1)/2.
double document_causal_pairs(std::span<const std::int32_t> starts, std::int64_t seq_len, std::int64_t row_begin,
                             std::int64_t row_end);

}  // namespace hzp::workloads
