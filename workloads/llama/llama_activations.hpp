// The Llama decoder's activation bytes per unit and micro-batch (activation_bytes.hpp), for LlamaSpec.
#pragma once

#include "hzp/workloads/activation_bytes.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/tensor_parallel.hpp"

namespace hzp::workloads::llama {

/// Unit `unit` (0 = embedding, 1..layers = blocks, layers + 1 = head) of `config` as one rank of `run` holds it.
UnitActivationBytes llama_activation_bytes(const LlamaConfig& config, int unit, const TensorParallelRun& run);

}  // namespace hzp::workloads::llama
