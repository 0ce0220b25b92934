// Document packing's lengths and boundaries (document_packing.hpp): counter-based log-normal draws per sample.
#include "hzp/workloads/data/document_packing.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "counter_rng.hpp"
#include "hzp/core/error.hpp"

namespace hzp::workloads {
namespace {

inline constexpr std::uint64_t kTagDocuments = 0x444F43554D454E54ull;  // "DOCUMENT"

std::string exact(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

std::string_view to_string(PackingKind k) { return name_of(kPackingKindNames, k); }

PackingKind parse_packing_kind(std::string_view text) {
  if (const auto k = value_of(kPackingKindNames, text)) return *k;
  HZP_THROW(ConfigError, "data.packing='", text, "' is not a packing: choose one of ", names_text(kPackingKindNames));
}

void DocumentPacking::validate() const {
  std::ostringstream bad;
  const auto problem = [&bad]() -> std::ostringstream& {
    if (bad.tellp() > 0) bad << "; ";
    return bad;
  };
  if (!(mean_tokens >= 1) || !std::isfinite(mean_tokens))
    problem() << "data.documents.mean_tokens=" << mean_tokens
              << " must be a finite mean document length of at least 1 token (e.g. 1024)";
  if (!(sigma >= 0) || !(sigma <= 5))
    problem() << "data.documents.sigma=" << sigma
              << " must lie in [0, 5] (the standard deviation of ln L; 0 gives equal lengths, 1 a typical corpus)";
  if (bad.tellp() > 0) HZP_THROW(ConfigError, bad.str());
}

std::vector<std::int32_t> DocumentPacking::starts(std::int64_t global_index, std::int64_t seq_len) const {
  HZP_CHECK(global_index >= 0, "sample index ", global_index, " is negative");
  HZP_CHECK(seq_len >= 1, "seq_len ", seq_len, " must be ≥ 1");
  std::vector<std::int32_t> out{0};
  if (!enabled()) return out;
  const double mu = std::log(mean_tokens) - 0.5 * sigma * sigma;
  rng::Stream draws(rng::fold(rng::fold(seed, kTagDocuments), static_cast<std::uint64_t>(global_index)));
  const auto draw = [&]() -> double { return std::max(1.0, std::round(std::exp(mu + sigma * draws.normal()))); };
  // The first document is the rest of one the previous sample began: a uniform fraction of a fresh length.
  const double first = draw();
  double at = std::max(1.0, std::ceil(draws.uniform_open() * first));
  while (at < static_cast<double>(seq_len)) {
    out.push_back(static_cast<std::int32_t>(at));
    at += draw();
  }
  return out;
}

Provenance DocumentPacking::provenance() const {
  Provenance p{{"packing", std::string(to_string(kind))}};
  if (!enabled()) return p;
  p.emplace_back("packing_distribution", "lognormal");
  p.emplace_back("packing_mean_tokens", exact(mean_tokens));
  p.emplace_back("packing_sigma", exact(sigma));
  p.emplace_back("packing_seed", std::to_string(seed));
  return p;
}

void document_first_positions(std::span<const std::int32_t> starts, std::int64_t seq_len,
                              std::span<std::int32_t> out) {
  HZP_CHECK(!starts.empty() && starts.front() == 0, "document starts must begin with 0");
  HZP_CHECK(std::int64_t(out.size()) == seq_len, "out holds ", out.size(), " positions, not seq_len = ", seq_len);
  for (std::size_t d = 0; d < starts.size(); ++d) {
    const std::int64_t begin = starts[d];
    const std::int64_t end = d + 1 < starts.size() ? starts[d + 1] : seq_len;
    HZP_CHECK(begin < end && end <= seq_len, "document starts must ascend and lie below seq_len = ", seq_len,
              " (document ", d, " spans [", begin, ", ", end, "))");
    std::fill(out.begin() + begin, out.begin() + end, static_cast<std::int32_t>(begin));
  }
}

double document_causal_pairs(std::span<const std::int32_t> starts, std::int64_t seq_len, std::int64_t row_begin,
                             std::int64_t row_end) {
  HZP_CHECK(!starts.empty() && starts.front() == 0, "document starts must begin with 0");
  HZP_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= seq_len, "rows [", row_begin, ", ", row_end,
            ") must lie in [0, ", seq_len, ")");
  double pairs = 0;
  for (std::size_t d = 0; d < starts.size(); ++d) {
    const std::int64_t begin = starts[d];
    const std::int64_t end = d + 1 < starts.size() ? starts[d + 1] : seq_len;
    HZP_CHECK(begin < end && end <= seq_len, "document starts must ascend and lie below seq_len = ", seq_len);
    const std::int64_t lo = std::max(begin, row_begin), hi = std::min(end, row_end);
    if (lo >= hi) continue;
    // Σ_{t=lo}^{hi-1} (t − begin + 1): an arithmetic series.
    const double a = static_cast<double>(lo - begin + 1), b = static_cast<double>(hi - begin);
    pairs += (a + b) * static_cast<double>(hi - lo) / 2;
  }
  return pairs;
}

}  // namespace hzp::workloads
