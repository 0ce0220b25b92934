// DataConfig validation and the data-source factory.
#include "hzp/workloads/data/data_config.hpp"

#include <limits>
#include <sstream>

#include "hzp/core/error.hpp"
#include "hzp/workloads/data/markov_source.hpp"
#include "hzp/workloads/data/packed_source.hpp"

namespace hzp::workloads {

std::string_view to_string(DataKind k) { return name_of(kDataKindNames, k); }

DataKind parse_data_kind(std::string_view text) {
  if (const auto k = value_of(kDataKindNames, text)) return *k;
  HZP_THROW(ConfigError, "data.source='", text, "' is not a data source: choose one of ", names_text(kDataKindNames));
}

MarkovChainParams DataConfig::resolved_synthetic() const {
  MarkovChainParams p = synthetic;
  if (p.vocab == 0) p.vocab = vocab;
  return p;
}

void DataConfig::validate() const {
  std::ostringstream bad;
  const auto problem = [&bad]() -> std::ostringstream& {
    if (bad.tellp() > 0) bad << "; ";
    return bad;
  };
  if (vocab < 1 || vocab > std::numeric_limits<std::int32_t>::max())
    problem() << "model.vocab=" << vocab << " must lie in [1, 2147483647]";
  if (seq_len < 1) problem() << "model.seq_len=" << seq_len << " must be ≥ 1";
  if (kind == DataKind::synthetic) {
    if (!path.empty())
      problem() << "data.path='" << path << "' is set but data.source=synthetic reads no file (remove "
                << "data.path, or set data.source to llmc, nanogpt or bytes)";
    const MarkovChainParams p = resolved_synthetic();
    if (p.vocab > vocab)
      problem() << "data.synthetic.vocab=" << p.vocab << " exceeds model.vocab=" << vocab
                << " (the chain's tokens must be valid model ids; leave data.synthetic.vocab to follow "
                << "model.vocab)";
    try {
      p.validate();
    } catch (const ConfigError& e) {
      problem() << e.message();
    }
  } else {
    if (path.empty())
      problem() << "data.source=" << to_string(kind) << " needs data.path (the token file), which is empty";
    if (kind == DataKind::nanogpt && vocab > kMaxUint16Vocab)
      problem() << "data.source=nanogpt stores uint16 tokens but model.vocab=" << vocab << " is over "
                << kMaxUint16Vocab << " (use an llm.c uint32 shard, data.source=llmc)";
  }
  try {
    packing.validate();
  } catch (const ConfigError& e) {
    problem() << e.message();
  }
  if (bad.tellp() > 0)
    HZP_THROW(ConfigError, "invalid data configuration: ", bad.str(),
              ". Fix: change the data.* or model.* values named so that each rule stated holds");
}

namespace {

std::unique_ptr<DataSource> make_token_source(const DataConfig& config, const MarkovBuildOptions& chain_options,
                                              const TokenFileOptions& file_options) {
  switch (config.kind) {
    case DataKind::synthetic:
      return std::make_unique<MarkovSource>(config.resolved_synthetic(), config.seq_len, chain_options);
    case DataKind::llmc:
      return std::make_unique<TokenFileSource>(config.path, TokenFileFormat::llmc, config.vocab,
                                               config.seq_len, file_options);
    case DataKind::nanogpt:
      return std::make_unique<TokenFileSource>(config.path, TokenFileFormat::nanogpt, config.vocab,
                                               config.seq_len, file_options);
    case DataKind::bytes:
      return std::make_unique<TokenFileSource>(config.path, TokenFileFormat::bytes, config.vocab,
                                               config.seq_len, file_options);
  }
  HZP_THROW(ConfigError, "unknown data source kind");
}

}  // namespace

std::unique_ptr<DataSource> make_data_source(const DataConfig& config,
                                             const MarkovBuildOptions& chain_options,
                                             const TokenFileOptions& file_options) {
  config.validate();
  return std::make_unique<PackedSource>(make_token_source(config, chain_options, file_options), config.packing);
}

}  // namespace hzp::workloads
