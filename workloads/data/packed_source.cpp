// PackedSource (packed_source.hpp): the wrapped source's tokens with DocumentPacking's boundaries.
#include "hzp/workloads/data/packed_source.hpp"

#include <utility>

namespace hzp::workloads {

PackedSource::PackedSource(std::unique_ptr<DataSource> inner, DocumentPacking packing)
    : inner_(std::move(inner)), packing_(packing) {
  HZP_CHECK(inner_ != nullptr, "a packed source needs a source to wrap");
  packing_.validate();
}

Provenance PackedSource::provenance() const {
  Provenance p = inner_->provenance();
  for (auto& kv : packing_.provenance()) p.push_back(std::move(kv));
  return p;
}

std::optional<ReferenceLosses> PackedSource::reference_losses() const {
  if (packing_.enabled()) return std::nullopt;
  return inner_->reference_losses();
}

std::vector<std::int32_t> PackedSource::document_starts(std::int64_t global_index) const {
  return packing_.starts(global_index, seq_len());
}

void PackedSource::sample_unchecked(std::int64_t global_index, std::span<std::int32_t> tokens) const {
  inner_->sample(global_index, tokens);
}

}  // namespace hzp::workloads
