// The workload's options: `model.*`, `train.*` and `data.*` keys with the model presets (registered into
// the one option table by option_keys.cpp), and the typed configuration structs built from a resolved
// configuration, so the run loop and the planner read the same values the table documents.
#pragma once

#include "hzp/core/options.hpp"
#include "hzp/workloads/data/data_config.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/train_config.hpp"

namespace hzp::harness {

/// Adds the workload factory's model.* keys, the train.* and data.* keys, and the factory's model presets
/// (their values come from workloads::model_presets(): one source of truth).
void register_model_keys(OptionTable& table);

/// The typed configs of a resolved configuration (the model's: workloads::model_spec_from). Each validates
/// itself and throws ConfigError naming every key and value involved.
workloads::TrainConfig train_config_from(const ResolvedConfig& config);
/// data.synthetic.vocab = 0 follows model.vocab; seq_len is model.seq_len.
workloads::DataConfig data_config_from(const ResolvedConfig& config);

}  // namespace hzp::harness
