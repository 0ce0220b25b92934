// A data source with documents packed into its sequences (`data.packing`, docs/data.md "Document packing"): the
// tokens are the wrapped source's, the document boundaries DocumentPacking's, so every rank, the simulator and the
// tests see the same documents for the same sample index. make_data_source wraps every source in one, so that the
// results file's data provenance always says how sequences were packed (packing = none included).
#pragma once

#include <memory>

#include "hzp/workloads/data/document_packing.hpp"
#include "hzp/workloads/data_source.hpp"

namespace hzp::workloads {

class PackedSource final : public DataSource {
 public:
  /// `packing` validated (ConfigError naming data.documents.*); `inner` not null.
  PackedSource(std::unique_ptr<DataSource> inner, DocumentPacking packing);

  std::int64_t vocab() const override { return inner_->vocab(); }
  std::int64_t seq_len() const override { return inner_->seq_len(); }
  /// The wrapped source's keys, then DocumentPacking::provenance()'s.
  Provenance provenance() const override;
  /// The wrapped source's without packing. With documents none: a perfect model that cannot see across a
  /// document boundary loses more than the chain's floor, and no closed form is implemented.
  std::optional<ReferenceLosses> reference_losses() const override;
  std::vector<std::int32_t> document_starts(std::int64_t global_index) const override;
  bool packs_documents() const override { return packing_.enabled(); }
  const DocumentPacking& packing() const noexcept { return packing_; }
  /// The source of the tokens.
  const DataSource& inner() const noexcept { return *inner_; }

 protected:
  void sample_unchecked(std::int64_t global_index, std::span<std::int32_t> tokens) const override;

 private:
  std::unique_ptr<DataSource> inner_;
  DocumentPacking packing_;
};

}  // namespace hzp::workloads
