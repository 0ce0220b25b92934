// The data section of a run's configuration as plain values, and the factory that turns it into a
// DataSource. The harness fills DataConfig from its option table (keys data.source, data.path,
// data.synthetic.order/vocab/successors/concentration/seed,
// data.packing, data.documents.mean_tokens/sigma/seed; vocab and seq_len from model.*).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hzp/core/enum_names.hpp"
#include "hzp/workloads/data/document_packing.hpp"
#include "hzp/workloads/data/markov_chain.hpp"
#include "hzp/workloads/data/token_file.hpp"
#include "hzp/workloads/data_source.hpp"

namespace hzp::workloads {

/// `data.source`.
enum class DataKind { synthetic, llmc, nanogpt, bytes };
inline constexpr EnumName<DataKind> kDataKindNames[] = {{"synthetic", DataKind::synthetic},
                                                        {"llmc", DataKind::llmc},
                                                        {"nanogpt", DataKind::nanogpt},
                                                        {"bytes", DataKind::bytes}};
std::string_view to_string(DataKind k);
/// A name of kDataKindNames; ConfigError naming the text and the choices.
DataKind parse_data_kind(std::string_view text);

struct DataConfig {
  DataKind kind = DataKind::synthetic;  ///< data.source
  std::string path;                     ///< data.path: the token file (file kinds only)
  std::int64_t vocab = 0;               ///< model.vocab: every token must be < vocab
  std::int64_t seq_len = 0;             ///< model.seq_len: a sample is seq_len+1 tokens
  /// data.synthetic.*; synthetic.vocab = 0 means "follow vocab" (the harness's default wiring).
  MarkovChainParams synthetic{.order = 1, .vocab = 0, .successors = 4, .concentration = 1.0, .seed = 0};
  /// data.documents.*: documents inside each sequence (any source); kind none keeps one document per sequence.
  DocumentPacking packing;

  /// ConfigError listing every problem at once, each naming its key and value: vocab/seq_len out of
  /// range; a synthetic chain vocabulary above the model's; invalid synthetic parameters; a file
  /// kind without data.path, or data.path given to the synthetic source; nanogpt (uint16) with
  /// vocab > 65,535; bad data.documents.* keys. File contents are checked when the source opens the file.
  void validate() const;
  /// `synthetic` with vocab resolved (0 → vocab).
  MarkovChainParams resolved_synthetic() const;
};

/// Validates `config` and builds its source: MarkovSource for synthetic (sampling seed =
/// data.synthetic.seed), TokenFileSource otherwise, inside a PackedSource that adds config.packing's document
/// boundaries and provenance. Throws what validate() and the sources throw.
std::unique_ptr<DataSource> make_data_source(const DataConfig& config,
                                             const MarkovBuildOptions& chain_options = {},
                                             const TokenFileOptions& file_options = {});

}  // namespace hzp::workloads
