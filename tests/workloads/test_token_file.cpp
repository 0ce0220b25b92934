// Token-file sources: small files of each format written here (llm.c GPT-2 uint16 and Llama-3
// uint32 shards, nanoGPT raw uint16, raw bytes), windows read back against the written tokens, the
// window rule, the content hash, and every error path with assertions on the message text.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include "data_test_util.hpp"
#include "hzp/workloads/data/token_file.hpp"

namespace hzp::workloads {
namespace {

using test::TempDir;
using test::throws_with;

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

template <typename T>
void append(std::vector<char>& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

/// An llm.c shard: header {magic, version, count}, then `tokens` as uint16 or uint32.
std::vector<char> llmc_file(std::int32_t magic, std::int32_t version, std::int32_t count,
                            const std::vector<std::uint32_t>& tokens, int width) {
  std::vector<char> out;
  std::int32_t header[256] = {magic, version, count};
  for (auto h : header) append(out, h);
  for (auto t : tokens) width == 2 ? append(out, std::uint16_t(t)) : append(out, t);
  return out;
}

std::vector<std::uint32_t> ramp(std::size_t n, std::uint32_t mod, std::uint32_t mul = 7) {
  std::vector<std::uint32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = std::uint32_t((i * mul + 3) % mod);
  return t;
}

std::uint64_t fnv1a64(const std::vector<char>& bytes) {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : bytes) h = (h ^ std::uint8_t(c)) * 1099511628211ull;
  return h;
}

// Every sample i must be tokens[off .. off+T] with off = (i·T) mod (N − T).
void expect_windows(const TokenFileSource& src, const std::vector<std::uint32_t>& tokens) {
  const std::int64_t T = src.seq_len(), N = std::int64_t(tokens.size());
  std::vector<std::int32_t> x(T + 1);
  for (std::int64_t i : {0, 1, 2, 5, 17, 1000, 123456789}) {
    const std::int64_t off = (i * T) % (N - T);
    EXPECT_EQ(src.window_offset(i), off);
    src.sample(i, x);
    for (std::int64_t t = 0; t <= T; ++t)
      ASSERT_EQ(std::uint32_t(x[t]), tokens[off + t]) << "i=" << i << " t=" << t;
  }
}

TEST(TokenFile, LlmcGpt2Uint16) {
  TempDir dir;
  const auto tokens = ramp(1000, 50257, 7919);
  const auto bytes = llmc_file(kLlmcMagicGpt2, kLlmcVersionGpt2, 1000, tokens, 2);
  write_bytes(dir.file("gpt2.bin"), bytes);
  const TokenFileSource src(dir.file("gpt2.bin"), TokenFileFormat::llmc, 50257, 64);
  EXPECT_EQ(src.num_tokens(), 1000);
  EXPECT_EQ(src.token_bytes(), 2);
  expect_windows(src, tokens);
  EXPECT_EQ(src.content_hash(), fnv1a64(bytes));
  const auto prov = src.provenance();
  std::map<std::string, std::string> m(prov.begin(), prov.end());
  EXPECT_EQ(m["kind"], "llmc");
  EXPECT_EQ(m["tokens"], "1000");
  EXPECT_EQ(m["token_bytes"], "2");
  EXPECT_EQ(m["llmc_magic"], "20240520");
  EXPECT_EQ(m["llmc_version"], "1");
  EXPECT_EQ(m["file_bytes"], std::to_string(bytes.size()));
  char want[32];
  std::snprintf(want, sizeof want, "fnv1a64:%016llx", (unsigned long long)fnv1a64(bytes));
  EXPECT_EQ(m["content_hash"], want);
  EXPECT_EQ(m["path"], dir.file("gpt2.bin"));
}

TEST(TokenFile, LlmcLlama3Uint32) {
  TempDir dir;
  const auto tokens = ramp(777, 128256, 104729);  // ids well above 65,535
  write_bytes(dir.file("llama.bin"), llmc_file(kLlmcMagicLlama3, kLlmcVersionLlama3, 777, tokens, 4));
  const TokenFileSource src(dir.file("llama.bin"), TokenFileFormat::llmc, 128256, 32);
  EXPECT_EQ(src.token_bytes(), 4);
  EXPECT_GT(*std::max_element(tokens.begin(), tokens.end()), 65535u);
  expect_windows(src, tokens);
}

TEST(TokenFile, NanoGptUint16AndRawBytes) {
  TempDir dir;
  const auto t16 = ramp(501, 50304, 31);
  std::vector<char> b16;
  for (auto t : t16) append(b16, std::uint16_t(t));
  write_bytes(dir.file("train.bin"), b16);
  const TokenFileSource nano(dir.file("train.bin"), TokenFileFormat::nanogpt, 50304, 16);
  EXPECT_EQ(nano.num_tokens(), 501);
  expect_windows(nano, t16);

  const auto t8 = ramp(300, 256, 13);
  std::vector<char> b8(t8.begin(), t8.end());
  write_bytes(dir.file("text.txt"), b8);
  const TokenFileSource raw(dir.file("text.txt"), TokenFileFormat::bytes, 256, 10);
  EXPECT_EQ(raw.num_tokens(), 300);
  EXPECT_EQ(raw.token_bytes(), 1);
  expect_windows(raw, t8);
}

TEST(TokenFile, SmallestFileHasOneWindow) {
  TempDir dir;
  const auto tokens = ramp(9, 256);
  write_bytes(dir.file("b"), std::vector<char>(tokens.begin(), tokens.end()));
  const TokenFileSource src(dir.file("b"), TokenFileFormat::bytes, 256, 8);
  std::vector<std::int32_t> x(9);
  for (std::int64_t i : {0, 1, 99}) {
    EXPECT_EQ(src.window_offset(i), 0);
    src.sample(i, x);
    for (int t = 0; t < 9; ++t) EXPECT_EQ(std::uint32_t(x[t]), tokens[t]);
  }
}

TEST(TokenFile, MissingOrNotAFile) {
  TempDir dir;
  EXPECT_TRUE(
      throws_with<IoError>([&] { TokenFileSource s(dir.file("nope.bin"), TokenFileFormat::llmc, 50257, 8); },
                           {"cannot open data file", "nope.bin", "No such file"}));
  EXPECT_TRUE(
      throws_with<IoError>([&] { TokenFileSource s(dir.path().string(), TokenFileFormat::bytes, 256, 8); },
                           {"not a regular file", dir.path().string()}));
}

TEST(TokenFile, TruncatedLlmc) {
  TempDir dir;
  auto bytes = llmc_file(kLlmcMagicGpt2, kLlmcVersionGpt2, 100, ramp(50, 1000), 2);
  write_bytes(dir.file("cut.bin"), bytes);
  EXPECT_TRUE(throws_with<IoError>(
      [&] { TokenFileSource s(dir.file("cut.bin"), TokenFileFormat::llmc, 1000, 8); },
      {"cut.bin", "truncated", "header says 100 tokens", "holds 1124 bytes", "50 whole tokens"}));
  write_bytes(dir.file("tiny.bin"), std::vector<char>(100, 0));
  EXPECT_TRUE(
      throws_with<IoError>([&] { TokenFileSource s(dir.file("tiny.bin"), TokenFileFormat::llmc, 1000, 8); },
                           {"tiny.bin", "truncated", "holds 100 bytes", "1024-byte header"}));
}

TEST(TokenFile, BadMagicVersionCountOrTrailingBytes) {
  TempDir dir;
  write_bytes(dir.file("m.bin"), llmc_file(12345, 1, 10, ramp(10, 100), 2));
  EXPECT_TRUE(
      throws_with<DataError>([&] { TokenFileSource s(dir.file("m.bin"), TokenFileFormat::llmc, 100, 4); },
                             {"m.bin", "bad magic 12345", "20240520", "20240801"}));
  write_bytes(dir.file("v.bin"), llmc_file(kLlmcMagicGpt2, 3, 10, ramp(10, 100), 2));
  EXPECT_TRUE(
      throws_with<DataError>([&] { TokenFileSource s(dir.file("v.bin"), TokenFileFormat::llmc, 100, 4); },
                             {"v.bin", "magic 20240520 but version 3", "expected version 1"}));
  write_bytes(dir.file("v7.bin"), llmc_file(kLlmcMagicLlama3, 1, 10, ramp(10, 100), 4));
  EXPECT_TRUE(
      throws_with<DataError>([&] { TokenFileSource s(dir.file("v7.bin"), TokenFileFormat::llmc, 100, 4); },
                             {"version 1", "expected version 7"}));
  write_bytes(dir.file("neg.bin"), llmc_file(kLlmcMagicGpt2, 1, -5, {}, 2));
  EXPECT_TRUE(
      throws_with<DataError>([&] { TokenFileSource s(dir.file("neg.bin"), TokenFileFormat::llmc, 100, 4); },
                             {"negative token count -5"}));
  write_bytes(dir.file("long.bin"), llmc_file(kLlmcMagicGpt2, 1, 10, ramp(12, 100), 2));
  EXPECT_TRUE(
      throws_with<DataError>([&] { TokenFileSource s(dir.file("long.bin"), TokenFileFormat::llmc, 100, 4); },
                             {"long.bin", "4 bytes more", "10 tokens"}));
}

TEST(TokenFile, OddNanoGptFile) {
  TempDir dir;
  write_bytes(dir.file("odd.bin"), std::vector<char>(41, 1));
  EXPECT_TRUE(throws_with<DataError>(
      [&] { TokenFileSource s(dir.file("odd.bin"), TokenFileFormat::nanogpt, 300, 4); },
      {"odd.bin", "odd number of bytes (41)", "uint16"}));
}

TEST(TokenFile, ShorterThanOneSample) {
  TempDir dir;
  write_bytes(dir.file("short.bin"), llmc_file(kLlmcMagicGpt2, 1, 8, ramp(8, 100), 2));
  EXPECT_TRUE(throws_with<DataError>(
      [&] { TokenFileSource s(dir.file("short.bin"), TokenFileFormat::llmc, 100, 16); },
      {"short.bin", "holds 8 tokens", "fewer than seq_len+1 = 17"}));
  write_bytes(dir.file("empty"), {});
  EXPECT_TRUE(
      throws_with<DataError>([&] { TokenFileSource s(dir.file("empty"), TokenFileFormat::bytes, 256, 1); },
                             {"holds 0 tokens", "seq_len+1 = 2"}));
}

TEST(TokenFile, TokenAtOrAboveVocab) {
  TempDir dir;
  auto tokens = ramp(200, 64);
  tokens[137] = 70;
  write_bytes(dir.file("bad.bin"), llmc_file(kLlmcMagicGpt2, 1, 200, tokens, 2));
  // Small file: found by the scan at open.
  EXPECT_TRUE(throws_with<DataError>(
      [&] { TokenFileSource s(dir.file("bad.bin"), TokenFileFormat::llmc, 64, 16); },
      {"bad.bin", "token id 70", "token position 137", "byte offset 1298", "vocab=64"}));
  // Scan disabled: found when a window containing it is sampled, naming the sample.
  TokenFileOptions lazy;
  lazy.scan_at_open_max_tokens = 0;
  const TokenFileSource src(dir.file("bad.bin"), TokenFileFormat::llmc, 64, 16, lazy);
  std::vector<std::int32_t> x(17);
  EXPECT_NO_THROW(src.sample(0, x));                             // tokens 0..16
  EXPECT_TRUE(throws_with<DataError>([&] { src.sample(8, x); },  // offset 128: tokens 128..144
                                     {"token id 70", "token position 137", "sample 8", "vocab=64"}));
}

TEST(TokenFile, Uint16WithVocabOver65535IsRefused) {
  TempDir dir;
  write_bytes(dir.file("g.bin"), llmc_file(kLlmcMagicGpt2, 1, 100, ramp(100, 1000), 2));
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { TokenFileSource s(dir.file("g.bin"), TokenFileFormat::llmc, 128256, 8); },
      {"g.bin", "uint16", "vocab=128256", "65535"}));
  std::vector<char> raw(200, 0);
  write_bytes(dir.file("n.bin"), raw);
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { TokenFileSource s(dir.file("n.bin"), TokenFileFormat::nanogpt, 65536, 8); },
      {"n.bin", "uint16", "vocab=65536", "65535"}));
  EXPECT_NO_THROW(TokenFileSource(dir.file("n.bin"), TokenFileFormat::nanogpt, 65535, 8));
}

TEST(TokenFile, BadArguments) {
  TempDir dir;
  write_bytes(dir.file("b"), std::vector<char>(100, 1));
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { TokenFileSource s(dir.file("b"), TokenFileFormat::bytes, 0, 8); }, {"vocab=0"}));
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { TokenFileSource s(dir.file("b"), TokenFileFormat::bytes, 256, 0); }, {"seq_len=0"}));
}

}  // namespace
}  // namespace hzp::workloads
