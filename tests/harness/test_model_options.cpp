// The model.*, train.* and data.* keys and the workload factory: each model preset, selected through the option table, resolves
// to exactly the workload layer's preset (one source of truth); explicit keys override a preset; the
// typed configs refuse bad combinations naming the keys and values.
#include <gtest/gtest.h>

#include "hzp/harness/model_options.hpp"
#include "hzp/harness/option_keys.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::harness {
namespace {

ResolvedConfig resolve(std::initializer_list<const char*> sets) {
  ConfigResolver r(hzpbench_options());
  for (const char* s : sets) r.add_set(s);
  return r.resolve();
}

TEST(ModelOptions, EveryPresetResolvesToTheWorkloadPreset) {
  for (const auto& p : workloads::model_presets()) {
    const std::string set = "model.preset=" + p.name;
    const ResolvedConfig c = resolve({set.c_str()});
    const workloads::LlamaConfig m = workloads::llama_config_from(c);
    EXPECT_EQ(m.num_params(), p.model.num_params()) << p.name;
    EXPECT_EQ(m.layers, p.model.layers) << p.name;
    EXPECT_EQ(m.heads, p.model.heads) << p.name;
    EXPECT_EQ(m.kv_heads, p.model.kv_heads) << p.name;
    EXPECT_EQ(m.seq_len, p.model.seq_len) << p.name;
    EXPECT_EQ(m.max_seq_len, p.model.max_seq_len) << p.name;
    EXPECT_EQ(m.rope_base, p.model.rope_base) << p.name;
    EXPECT_EQ(m.tied_embeddings, p.model.tied_embeddings) << p.name;
    const workloads::TrainConfig t = train_config_from(c);
    EXPECT_EQ(t.global_batch, p.train.global_batch) << p.name;
    EXPECT_EQ(t.micro_batch_size, p.train.micro_batch_size) << p.name;
    EXPECT_EQ(t.lr, p.train.lr) << p.name;
    EXPECT_EQ(t.lr_min, p.train.lr_min) << p.name;
    EXPECT_EQ(t.precision, p.train.precision) << p.name;
    const workloads::DataConfig d = data_config_from(c);
    EXPECT_EQ(d.vocab, p.model.vocab) << p.name;
    EXPECT_EQ(d.resolved_synthetic().vocab, p.model.vocab) << "data.synthetic.vocab follows model.vocab";
    EXPECT_EQ(d.synthetic.successors, p.chain.successors) << p.name;
  }
}

TEST(ModelOptions, DefaultsAreTinyAndExplicitKeysOverrideThePreset) {
  const workloads::LlamaConfig tiny = workloads::llama_config_from(resolve({}));
  EXPECT_EQ(tiny.preset, "tiny");
  EXPECT_EQ(tiny.num_params(), workloads::model_preset("tiny").model.num_params());
  const ResolvedConfig c = resolve({"model.preset=small", "model.layers=2", "train.lr=0.01"});
  EXPECT_EQ(workloads::llama_config_from(c).layers, 2);
  EXPECT_EQ(workloads::llama_config_from(c).hidden, 512);
  EXPECT_EQ(train_config_from(c).lr, 0.01);
}

// The harness builds the model through the workload factory: the spec of the default kind describes the
// same model the Llama factory builds, without allocating it.
TEST(ModelOptions, TheFactoryBuildsTheConfiguredKind) {
  const ResolvedConfig c = resolve({"model.preset=small"});
  EXPECT_EQ(c.get_string("model.kind"), "llama");
  const auto spec = workloads::model_spec_from(c);
  const workloads::LlamaConfig small = workloads::model_preset("small").model;
  EXPECT_EQ(spec->kind(), "llama");
  EXPECT_EQ(spec->num_params(), small.num_params());
  EXPECT_EQ(spec->layout().total_numel(), small.num_params());
  EXPECT_EQ(spec->widest_linear().out, small.ffn_hidden);
  EXPECT_EQ(spec->widest_linear().in, small.hidden);
  const auto model = spec->build(workloads::Precision::fp32);
  EXPECT_EQ(model->describe(), spec->describe());
  EXPECT_EQ(model->layout().num_units(), small.layers + 2);
  EXPECT_EQ(workloads::model_kinds(), std::vector<std::string>{"llama"});
}

TEST(ModelOptions, RefusalsNameTheValues) {
  EXPECT_THROW(workloads::llama_config_from(resolve({"model.heads=6", "model.kv_heads=4"})), ConfigError);
  try {
    workloads::llama_config_from(resolve({"model.seq_len=4096"}));
    FAIL() << "seq_len above tiny's limit was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.seq_len = 4096"), std::string::npos) << what;
    EXPECT_NE(what.find("model.max_seq_len = 1024"), std::string::npos) << what;
  }
  EXPECT_THROW(train_config_from(resolve({"train.global_batch=10", "train.micro_batch_size=4"})), ConfigError);
}

// The train.* and data.* enumeration keys against names written out here: each name the option parser accepts
// reaches the typed config as its value and reads back as the same name through to_string (what results record);
// `list` offers exactly these names; an unknown one is a ConfigError naming the key, the value and the choices.
void expect_refusal(const std::string& key, const std::string& choices) {
  try {
    resolve({(key + "=bogus").c_str()});
    ADD_FAILURE() << key << " accepted an unknown name";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find(key + " = bogus"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(choices), std::string::npos) << e.message();
  }
}

TEST(ModelOptions, EnumerationNamesRoundTrip) {
  const OptionTable& t = hzpbench_options();
  using workloads::Precision;
  for (const auto& [name, value] : std::vector<std::pair<std::string, Precision>>{
           {"fp32", Precision::fp32}, {"bf16-mixed", Precision::bf16_mixed}, {"fp64", Precision::fp64}}) {
    const workloads::TrainConfig tr = train_config_from(resolve({("train.precision=" + name).c_str()}));
    EXPECT_EQ(tr.precision, value) << name;
    EXPECT_EQ(workloads::to_string(tr.precision), name);
  }
  EXPECT_EQ(t.find("train.precision")->allowed, (std::vector<std::string>{"fp32", "bf16-mixed", "fp64"}));
  expect_refusal("train.precision", "fp32, bf16-mixed, fp64");

  using workloads::DataKind;
  for (const auto& [name, value] : std::vector<std::pair<std::string, DataKind>>{
           {"synthetic", DataKind::synthetic}, {"llmc", DataKind::llmc}, {"nanogpt", DataKind::nanogpt},
           {"bytes", DataKind::bytes}}) {
    // A file source needs a path (its contents are read when the source opens, not here).
    const std::string source = "data.source=" + name;
    const char* path = value == DataKind::synthetic ? "data.path=" : "data.path=tokens.bin";
    const workloads::DataConfig d = data_config_from(resolve({source.c_str(), path}));
    EXPECT_EQ(d.kind, value) << name;
    EXPECT_EQ(workloads::to_string(d.kind), name);
  }
  EXPECT_EQ(t.find("data.source")->allowed, (std::vector<std::string>{"synthetic", "llmc", "nanogpt", "bytes"}));
  expect_refusal("data.source", "synthetic, llmc, nanogpt, bytes");

  using workloads::PackingKind;
  for (const auto& [name, value] : std::vector<std::pair<std::string, PackingKind>>{
           {"none", PackingKind::none}, {"documents", PackingKind::documents}}) {
    const workloads::DataConfig d = data_config_from(resolve({("data.packing=" + name).c_str()}));
    EXPECT_EQ(d.packing.kind, value) << name;
    EXPECT_EQ(workloads::to_string(d.packing.kind), name);
  }
  EXPECT_EQ(t.find("data.packing")->allowed, (std::vector<std::string>{"none", "documents"}));
  expect_refusal("data.packing", "none, documents");
}

}  // namespace
}  // namespace hzp::harness
