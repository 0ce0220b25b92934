// The Llama spec's activation bytes (the plan's activation estimate) against the model's own allocations: tiny,
// one micro-batch of 1 and 2 sequences, fp32 / bf16-mixed / fp64, tied and untied, with and without recompute,
// unit by unit (activation_check.hpp), and the MoE decoder's blocks (tiny-moe, and without shared experts). Tensor and context parallelism are checked the same way under mpiexec in
// test_llama_tensor_parallel and test_llama_context_parallel.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "activation_check.hpp"
#include "data_test_util.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

template <typename P>
void check(Precision precision, bool tied, const workloads::LlamaConfig& shape = {} /* tiny's */) {
  workloads::LlamaConfig cfg = shape;
  cfg.tied_embeddings = tied;
  const auto spec = workloads::llama_spec(cfg);
  const auto model = workloads::make_llama(cfg, precision);
  auto params = initial_params<P>(*model, 5);
  using G = std::conditional_t<std::is_same_v<P, double>, double, float>;
  std::vector<G> grads(params.size());
  for (const std::int64_t mb : {1, 2})
    for (const bool recompute : {false, true}) {
      const TokenBatch batch = random_sequences(mb, cfg.seq_len, cfg.vocab, 3);
      const workloads::TensorParallelRun run{.recompute = recompute, .micro_batch_size = mb, .precision = precision};
      expect_activation_bytes_match(*spec, *model, run, flat_view(params), flat_view(grads), batch,
                                    std::string(workloads::to_string(precision)) + (tied ? " tied" : " untied") +
                                        " mb " + std::to_string(mb) + (recompute ? " recompute" : ""));
    }
}

TEST(LlamaActivations, Fp32) { check<float>(Precision::fp32, true); }
TEST(LlamaActivations, Fp32Untied) { check<float>(Precision::fp32, false); }
TEST(LlamaActivations, Bf16Mixed) { check<bf16>(Precision::bf16_mixed, true); }
TEST(LlamaActivations, Fp64) { check<double>(Precision::fp64, false); }
// tiny-moe: a dense block, then MoE blocks with a shared expert; and every block MoE without shared experts.
TEST(LlamaActivations, TinyMoeFp32) { check<float>(Precision::fp32, true, workloads::model_preset("tiny-moe").model); }
TEST(LlamaActivations, TinyMoeBf16Mixed) {
  check<bf16>(Precision::bf16_mixed, true, workloads::model_preset("tiny-moe").model);
}
TEST(LlamaActivations, MoeWithoutSharedExpertsFp32) {
  workloads::LlamaConfig c = workloads::model_preset("tiny-moe").model;
  c.moe.shared_experts = 0;
  c.moe.dense_layers = 0;
  c.moe.capacity_factor = 1.0;  // the expert buffers are sized for every assignment, dropped or not
  check<float>(Precision::fp32, false, c);
}

}  // namespace
}  // namespace hzp::test
