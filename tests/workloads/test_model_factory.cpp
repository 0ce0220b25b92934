// The workload layer's enumeration keys (model_factory.cpp: model.attention, model.router_score, model.balance)
// against names written out here: each name the option parser accepts reaches LlamaConfig as its value and
// reads back as the same name through to_string; the keys offer exactly these names; an unknown name is a
// ConfigError naming the key, the value and the allowed names.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/core/options.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/moe.hpp"

namespace hzp::workloads {
namespace {

const OptionTable& table() {
  static const OptionTable t = [] {
    OptionTable made;
    register_model_options(made);
    return made;
  }();
  return t;
}

LlamaConfig parse(const std::vector<std::string>& sets) {
  ConfigResolver r(table());
  for (const std::string& s : sets) r.add_set(s);
  return llama_config_from(r.resolve());
}

void expect_names(const char* key, const std::vector<std::string>& names) {
  EXPECT_EQ(table().find(key)->allowed, names) << key;
  try {
    parse({std::string(key) + "=bogus"});
    ADD_FAILURE() << key << " accepted an unknown name";
  } catch (const ConfigError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find(std::string(key) + " = bogus"), std::string::npos) << m;
    std::string choices;
    for (const std::string& n : names) choices += (choices.empty() ? "" : ", ") + n;
    EXPECT_NE(m.find(choices), std::string::npos) << m;
  }
}

TEST(ModelOptionNames, AttentionRoundTrips) {
  using kernels::AttentionImpl;
  for (const auto& [name, value] : std::vector<std::pair<std::string, AttentionImpl>>{
           {"auto", AttentionImpl::automatic}, {"fused", AttentionImpl::fused}, {"unfused", AttentionImpl::unfused}}) {
    const LlamaConfig m = parse({"model.attention=" + name});
    EXPECT_EQ(m.attention, value) << name;
    EXPECT_EQ(kernels::to_string(m.attention), name);
  }
  expect_names("model.attention", {"auto", "fused", "unfused"});
}

// The MoE keys are read whether or not the model has experts.
TEST(ModelOptionNames, RouterScoreAndBalanceRoundTrip) {
  for (const auto& [name, value] : std::vector<std::pair<std::string, RouterScore>>{
           {"sigmoid", RouterScore::sigmoid}, {"softmax", RouterScore::softmax}}) {
    const LlamaConfig m = parse({"model.router_score=" + name});
    EXPECT_EQ(m.moe.router_score, value) << name;
    EXPECT_EQ(to_string(m.moe.router_score), name);
  }
  for (const auto& [name, value] : std::vector<std::pair<std::string, MoeBalance>>{{"bias", MoeBalance::bias},
                                                                                  {"aux_loss", MoeBalance::aux_loss}}) {
    const LlamaConfig m = parse({"model.balance=" + name});
    EXPECT_EQ(m.moe.balance, value) << name;
    EXPECT_EQ(to_string(m.moe.balance), name);
  }
  expect_names("model.router_score", {"sigmoid", "softmax"});
  expect_names("model.balance", {"bias", "aux_loss"});
}

}  // namespace
}  // namespace hzp::workloads
