// Model presets (`model.preset`): each a Llama shape with its training and data defaults, in one
// place from which the option table's presets are generated. Constructing, validating and counting a
// preset allocates no parameters, so the 9B and 36B presets can be planned on any machine.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "hzp/workloads/data/markov_chain.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/train_config.hpp"

namespace hzp::workloads {

struct ModelPreset {
  std::string name;
  std::string meaning;   ///< one line for `hzpbench list`
  std::string source;    ///< where the shape comes from (a published config, or "assumed: ...")
  LlamaConfig model;     ///< model.preset set to `name`
  TrainConfig train;     ///< train.* defaults
  /// data.synthetic.* defaults; vocab 0 = follow model.vocab (the synthetic chain's vocabulary is the
  /// model's).
  MarkovChainParams chain;
};

/// tiny, small, 1b, 9b, seed-oss-36b, tiny-moe, small-moe, moe-100b, in that order.
std::span<const ModelPreset> model_presets();
/// The preset called `name`; ConfigError naming it and listing the choices.
const ModelPreset& model_preset(std::string_view name);

}  // namespace hzp::workloads
