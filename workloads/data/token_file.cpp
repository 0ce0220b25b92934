// TokenFileSource: header parsing and validation for the three file formats, the window rule, and
// the per-token vocabulary check. Tokens are little-endian on disk and read with memcpy (the map
// gives no alignment promise for a reader's purposes, and memcpy of 2/4 bytes compiles to a load).
#include "hzp/workloads/data/token_file.hpp"

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "hzp/core/error.hpp"
#include "mapped_file.hpp"

namespace hzp::workloads {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; a big-endian host would need byte swaps here");

std::string_view to_string(TokenFileFormat f) {
  switch (f) {
    case TokenFileFormat::llmc:
      return "llmc";
    case TokenFileFormat::nanogpt:
      return "nanogpt";
    case TokenFileFormat::bytes:
      return "bytes";
  }
  return "?";
}

TokenFileSource::TokenFileSource(std::string path, TokenFileFormat format, std::int64_t vocab,
                                 std::int64_t seq_len, const TokenFileOptions& options)
    : format_(format), vocab_(vocab), seq_len_(seq_len) {
  if (vocab < 1 || vocab > std::numeric_limits<std::int32_t>::max() || seq_len < 1)
    HZP_THROW(ConfigError, "token file '", path, "' (", to_string(format), "): vocab=", vocab,
              " must lie in [1, 2147483647] and seq_len=", seq_len, " must be ≥ 1");
  file_ = std::make_unique<detail::MappedFile>(std::move(path));
  const std::string& p = file_->path();
  const auto bytes = file_->bytes();
  const auto size = std::int64_t(bytes.size());

  switch (format) {
    case TokenFileFormat::llmc: {
      constexpr std::int64_t header_bytes = kLlmcHeaderInts * 4;
      if (size < header_bytes)
        HZP_THROW(IoError, "llm.c token file '", p, "' is truncated: it holds ", size,
                  " bytes, fewer than the ", header_bytes, "-byte header (", kLlmcHeaderInts, " int32)");
      std::int32_t head[3];
      std::memcpy(head, bytes.data(), sizeof head);
      magic_ = head[0];
      version_ = head[1];
      if (magic_ == kLlmcMagicGpt2)
        token_bytes_ = 2;
      else if (magic_ == kLlmcMagicLlama3)
        token_bytes_ = 4;
      else
        HZP_THROW(DataError, "llm.c token file '", p, "' has bad magic ", magic_, " (expected ",
                  kLlmcMagicGpt2, " for GPT-2 uint16 shards or ", kLlmcMagicLlama3,
                  " for Llama-3 uint32 shards): not an llm.c shard, or corrupt");
      const std::int32_t want = token_bytes_ == 2 ? kLlmcVersionGpt2 : kLlmcVersionLlama3;
      if (version_ != want)
        HZP_THROW(DataError, "llm.c token file '", p, "' has magic ", magic_, " but version ", version_,
                  " (expected version ", want, " with that magic)");
      if (head[2] < 0)
        HZP_THROW(DataError, "llm.c token file '", p, "' has a negative token count ", head[2],
                  " in its header");
      num_tokens_ = head[2];
      data_offset_ = header_bytes;
      const std::int64_t expected = header_bytes + num_tokens_ * token_bytes_;
      if (size < expected)
        HZP_THROW(IoError, "llm.c token file '", p, "' is truncated: its header says ", num_tokens_,
                  " tokens of ", token_bytes_, " bytes (", expected, " bytes with the header) but the ",
                  "file holds ", size, " bytes (", (size - header_bytes) / token_bytes_, " whole tokens)");
      if (size > expected)
        HZP_THROW(DataError, "llm.c token file '", p, "' holds ", size - expected, " bytes more than ",
                  "its header's ", num_tokens_, " tokens of ", token_bytes_, " bytes (", expected,
                  " bytes expected, ", size, " found): corrupt or not an llm.c shard");
      break;
    }
    case TokenFileFormat::nanogpt:
      token_bytes_ = 2;
      if (size % 2 != 0)
        HZP_THROW(DataError, "nanoGPT token file '", p, "' holds an odd number of bytes (", size,
                  "): not a whole number of uint16 tokens (truncated or not a nanoGPT .bin)");
      num_tokens_ = size / 2;
      break;
    case TokenFileFormat::bytes:
      token_bytes_ = 1;
      num_tokens_ = size;
      break;
  }

  if (token_bytes_ == 2 && vocab_ > kMaxUint16Vocab)
    HZP_THROW(ConfigError, "token file '", p, "' (", to_string(format), ") stores uint16 tokens, but ",
              "the model's vocab=", vocab_, " is over ", kMaxUint16Vocab, ", the most uint16 tokens serve: ",
              "the file was tokenised for another model; use a uint32 file (llm.c Llama-3 format, magic ",
              kLlmcMagicLlama3, ") or a model with vocab ≤ ", kMaxUint16Vocab);
  if (num_tokens_ < seq_len_ + 1)
    HZP_THROW(DataError, "token file '", p, "' holds ", num_tokens_,
              " tokens, fewer than seq_len+1 = ", seq_len_ + 1,
              " (one sample): use a longer file or a smaller seq_len");

  if (num_tokens_ <= options.scan_at_open_max_tokens)
    for (std::int64_t i = 0; i < num_tokens_; ++i)
      if (const std::uint32_t id = token_at(i); id >= std::uint64_t(vocab_)) throw_bad_token(id, i, -1);

  content_hash_ = detail::fnv1a64(bytes);
}

TokenFileSource::~TokenFileSource() = default;

const std::string& TokenFileSource::path() const { return file_->path(); }

std::uint32_t TokenFileSource::token_at(std::int64_t pos) const {
  const std::byte* at = file_->bytes().data() + data_offset_ + pos * token_bytes_;
  switch (token_bytes_) {
    case 1:
      return std::uint32_t(*at);
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, at, 2);
      return v;
    }
    default: {
      std::uint32_t v;
      std::memcpy(&v, at, 4);
      return v;
    }
  }
}

std::int64_t TokenFileSource::window_offset(std::int64_t i) const {
  // 128-bit product: i·T overflows 64 bits long before i does at realistic T.
  __extension__ typedef unsigned __int128 u128;
  const std::uint64_t windows = std::uint64_t(num_tokens_ - seq_len_);  // valid offsets 0..N−T−1
  return std::int64_t((u128(std::uint64_t(i)) * u128(std::uint64_t(seq_len_))) % windows);
}

void TokenFileSource::sample_unchecked(std::int64_t i, std::span<std::int32_t> tokens) const {
  const std::int64_t off = window_offset(i);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::uint32_t id = token_at(off + std::int64_t(t));
    if (id >= std::uint64_t(vocab_)) [[unlikely]]
      throw_bad_token(id, off + std::int64_t(t), i);
    tokens[t] = std::int32_t(id);
  }
}

void TokenFileSource::throw_bad_token(std::uint32_t id, std::int64_t pos, std::int64_t sample) const {
  std::ostringstream where;
  if (sample >= 0) where << " (sample " << sample << ")";
  HZP_THROW(DataError, "token file '", path(), "' (", to_string(format_), "): token id ", id,
            " at token position ", pos, " (byte offset ", data_offset_ + pos * token_bytes_, ")", where.str(),
            " is ≥ the model's vocab=", vocab_, ": the file was tokenised for a larger vocabulary");
}

Provenance TokenFileSource::provenance() const {
  char hash[32];
  std::snprintf(hash, sizeof hash, "fnv1a64:%016llx", static_cast<unsigned long long>(content_hash_));
  Provenance p{{"kind", std::string(to_string(format_))},
               {"path", path()},
               {"absolute_path", std::filesystem::absolute(path()).lexically_normal().string()},
               {"file_bytes", std::to_string(file_->bytes().size())},
               {"content_hash", hash},
               {"tokens", std::to_string(num_tokens_)},
               {"token_bytes", std::to_string(token_bytes_)}};
  if (format_ == TokenFileFormat::llmc) {
    p.emplace_back("llmc_magic", std::to_string(magic_));
    p.emplace_back("llmc_version", std::to_string(version_));
  }
  p.emplace_back("vocab", std::to_string(vocab_));
  p.emplace_back("seq_len", std::to_string(seq_len_));
  p.emplace_back("window", "(i*seq_len) mod (tokens-seq_len)");
  return p;
}

}  // namespace hzp::workloads
