// DataConfig validation (every problem named at once, with its key and value) and the factory
// building a synthetic or a token-file source from plain config values.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "data_test_util.hpp"
#include "hzp/workloads/data/data_config.hpp"
#include "hzp/workloads/data/packed_source.hpp"
#include "hzp/workloads/data/markov_source.hpp"

namespace hzp::workloads {
namespace {

using test::TempDir;
using test::throws_with;

DataConfig synthetic_config() {
  DataConfig c;
  c.vocab = 64;
  c.seq_len = 32;
  c.synthetic.seed = 5;
  return c;
}

TEST(DataConfig, ParsesKinds) {
  EXPECT_EQ(parse_data_kind("synthetic"), DataKind::synthetic);
  EXPECT_EQ(parse_data_kind("llmc"), DataKind::llmc);
  EXPECT_EQ(parse_data_kind("nanogpt"), DataKind::nanogpt);
  EXPECT_EQ(parse_data_kind("bytes"), DataKind::bytes);
  EXPECT_TRUE(throws_with<ConfigError>([] { parse_data_kind("shakespeare"); },
                                       {"data.source='shakespeare'", "synthetic, llmc, nanogpt, bytes"}));
}

TEST(DataConfig, SyntheticVocabFollowsModelVocab) {
  const auto src = make_data_source(synthetic_config());
  EXPECT_EQ(src->vocab(), 64);
  EXPECT_EQ(src->seq_len(), 32);
  const auto* packed = dynamic_cast<const PackedSource*>(src.get());  // every source says how it is packed
  ASSERT_NE(packed, nullptr);
  EXPECT_FALSE(packed->packing().enabled());
  const auto* m = dynamic_cast<const MarkovSource*>(&packed->inner());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->chain().params()->successors, 4);
  EXPECT_EQ(m->seed(), 5u);
  ASSERT_TRUE(src->reference_losses().has_value());
  EXPECT_EQ(src->reference_losses()->floor, src->reference_losses()->entropy_rate);  // order 1
}

TEST(DataConfig, EveryProblemIsNamed) {
  DataConfig c;
  c.vocab = 0;
  c.seq_len = -3;
  c.synthetic.order = 5;
  c.synthetic.concentration = -2;
  EXPECT_TRUE(throws_with<ConfigError>(
      [&] { c.validate(); },
      {"model.vocab=0", "model.seq_len=-3", "data.synthetic.order=5", "data.synthetic.concentration=-2"}));
  DataConfig big = synthetic_config();
  big.synthetic.vocab = 100;
  EXPECT_TRUE(
      throws_with<ConfigError>([&] { big.validate(); }, {"data.synthetic.vocab=100", "model.vocab=64"}));
  DataConfig stray = synthetic_config();
  stray.path = "/data/x.bin";
  EXPECT_TRUE(throws_with<ConfigError>([&] { stray.validate(); }, {"data.path='/data/x.bin'", "synthetic"}));
  DataConfig nopath = synthetic_config();
  nopath.kind = DataKind::llmc;
  EXPECT_TRUE(throws_with<ConfigError>([&] { nopath.validate(); }, {"data.source=llmc needs data.path"}));
  DataConfig nano = synthetic_config();
  nano.kind = DataKind::nanogpt;
  nano.path = "x.bin";
  nano.vocab = 128256;
  EXPECT_TRUE(throws_with<ConfigError>([&] { nano.validate(); }, {"nanogpt", "model.vocab=128256", "65535"}));
}

TEST(DataConfig, BuildsTokenFileSources) {
  TempDir dir;
  {
    std::ofstream f(dir.file("t.txt"), std::ios::binary);
    f << std::string(100, 'a');
  }
  DataConfig c;
  c.kind = DataKind::bytes;
  c.path = dir.file("t.txt");
  c.vocab = 256;
  c.seq_len = 16;
  const auto src = make_data_source(c);
  std::vector<std::int32_t> x(17);
  src->sample(3, x);
  for (auto t : x) EXPECT_EQ(t, 'a');
  EXPECT_FALSE(src->reference_losses().has_value());
  const auto prov = src->provenance();
  std::map<std::string, std::string> m(prov.begin(), prov.end());
  EXPECT_EQ(m["kind"], "bytes");
  EXPECT_EQ(m["tokens"], "100");
  EXPECT_EQ(m["content_hash"].rfind("fnv1a64:", 0), 0u);
}

}  // namespace
}  // namespace hzp::workloads
