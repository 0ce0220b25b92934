// Data sources over pre-tokenised files, memory-mapped: llm.c's shards (256-int32 header; uint16
// GPT-2 or uint32 Llama-3 tokens), nanoGPT's headerless uint16 .bin, and raw bytes (tokens 0..255).
// Sample i is a contiguous window of seq_len+1 tokens at offset (i·seq_len) mod (N − seq_len).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hzp/workloads/data_source.hpp"

namespace hzp::workloads {

namespace detail {
class MappedFile;
}

enum class TokenFileFormat {
  llmc,     ///< llm.c shard: int32 header[256] = {magic, version, token count, 0...}, then the tokens
  nanogpt,  ///< nanoGPT train.bin/val.bin: little-endian uint16 tokens, no header
  bytes,    ///< any file: each byte is a token (vocabulary 256)
};
std::string_view to_string(TokenFileFormat f);

/// llm.c's header values (karpathy/llm.c, dev/data/data_common.py, HEADERS_INFO and write_datafile:
/// header = 256 int32, [0] magic, [1] version, [2] token count; "gpt-2": magic 20240520, version 1,
/// uint16 tokens; "llama-3": magic 20240801, version 7, uint32 tokens).
inline constexpr std::int32_t kLlmcHeaderInts = 256;
inline constexpr std::int32_t kLlmcMagicGpt2 = 20240520, kLlmcVersionGpt2 = 1;
inline constexpr std::int32_t kLlmcMagicLlama3 = 20240801, kLlmcVersionLlama3 = 7;
/// The largest vocabulary accepted with uint16 tokens (issue 5: "a vocabulary over 65,535 with
/// uint16 tokens is refused").
inline constexpr std::int64_t kMaxUint16Vocab = 65535;

struct TokenFileOptions {
  /// Files of at most this many tokens are scanned once at open for ids ≥ vocab, so a bad file fails
  /// before training; larger ones are checked window by window as they are sampled.
  std::int64_t scan_at_open_max_tokens = std::int64_t{1} << 26;
};

/// Thread-safety: immutable after construction (reads of a private read-only mapping).
class TokenFileSource final : public DataSource {
 public:
  /// Opens and validates the file. Errors name the file and the numbers:
  ///  IoError — missing/unreadable/not a regular file; truncated (llm.c header says N tokens, the file
  ///            holds fewer; or shorter than the header itself).
  ///  DataError — bad llm.c magic or version; a negative token count; bytes after the header's N
  ///            tokens; an odd byte count for uint16; fewer than seq_len+1 tokens; (scan) an id ≥ vocab.
  ///  ConfigError — vocab > 65,535 with uint16 tokens; vocab or seq_len out of range.
  TokenFileSource(std::string path, TokenFileFormat format, std::int64_t vocab, std::int64_t seq_len,
                  const TokenFileOptions& options = {});
  ~TokenFileSource() override;

  std::int64_t vocab() const override { return vocab_; }
  std::int64_t seq_len() const override { return seq_len_; }
  TokenFileFormat format() const { return format_; }
  const std::string& path() const;
  std::int64_t num_tokens() const { return num_tokens_; }
  int token_bytes() const { return token_bytes_; }
  /// FNV-1a 64 of the whole file (header included), computed at open.
  std::uint64_t content_hash() const { return content_hash_; }
  /// (global_index · seq_len) mod (N − seq_len): consecutive samples tile the file with stride T
  /// (inputs disjoint, each target window overlapping the next input by one token, as llm.c reads),
  /// wrapping around with a shifted phase after N − T samples' worth of tokens.
  std::int64_t window_offset(std::int64_t global_index) const;
  /// Token at position `pos` ∈ [0, N) of the token array (header excluded), unchecked against vocab.
  std::uint32_t token_at(std::int64_t pos) const;

  /// Keys: kind (llmc|nanogpt|bytes), path, absolute_path, file_bytes, content_hash ("fnv1a64:<16 hex>"),
  /// tokens, token_bytes, [llmc_magic, llmc_version], vocab, seq_len, window ("(i*seq_len) mod
  /// (tokens-seq_len)").
  Provenance provenance() const override;

 protected:
  void sample_unchecked(std::int64_t global_index, std::span<std::int32_t> tokens) const override;

 private:
  [[noreturn]] void throw_bad_token(std::uint32_t id, std::int64_t pos, std::int64_t sample) const;

  std::unique_ptr<detail::MappedFile> file_;
  TokenFileFormat format_;
  std::int64_t vocab_, seq_len_;
  std::int64_t num_tokens_ = 0;
  std::int64_t data_offset_ = 0;  // bytes before the first token
  int token_bytes_ = 1;
  std::int32_t magic_ = 0, version_ = 0;
  std::uint64_t content_hash_ = 0;
};

}  // namespace hzp::workloads
