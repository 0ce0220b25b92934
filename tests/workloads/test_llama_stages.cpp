// The model driven as pipeline stages: contexts over contiguous unit ranges, each stage's output copied
// into the next stage's input slot and each input gradient into the previous stage's output-gradient
// slot, give the same loss and the same gradients, bit for bit, as one context over the whole model (the
// independent reference: the whole-model loop every scheduler runs), also when each output-gradient slot is taken
// while the output is still held (output_grad_slot_keeping_output: a GPU stage's receive posted ahead), which then
// holds one boundary more until the backward starts and frees it. Also the order checks a stage adds.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "data_test_util.hpp"
#include "hzp/core/memory_backing.hpp"
#include "model_test_util.hpp"

namespace hzp::test {
namespace {

using workloads::Precision;

void copy_view(TensorView dst, ConstTensorView src) {
  ASSERT_EQ(dst.shape(), src.shape());
  ASSERT_EQ(dst.dtype(), src.dtype());
  std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.numel()) * dtype_size(src.dtype()));
}

// Runs every micro-batch through stages cut before each unit in `cuts`; returns the global mean loss and
// accumulates gradients into `grads` as the whole-model loop does.
double run_stages(const workloads::Workload& w, ConstTensorView params, TensorView grads,
                  const std::vector<TokenBatch>& mbs, double normaliser, bool recompute, const std::vector<int>& cuts,
                  CachingAllocator& alloc, bool keep_output = false) {
  const auto& layout = w.layout();
  const int units = layout.num_units();
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(units);
  const std::int64_t mbs_size = static_cast<std::int64_t>(mbs.front().inputs.size()) / w.seq_len();
  std::vector<std::unique_ptr<workloads::MicroBatchContext>> stages;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s)
    stages.push_back(w.make_context(alloc, {.micro_batch_size = mbs_size,
                                            .recompute = recompute,
                                            .first_unit = bounds[s],
                                            .end_unit = bounds[s + 1]}));
  double loss = 0;
  const std::span<const std::int32_t> none;
  for (std::size_t j = 0; j < mbs.size(); ++j) {
    for (std::size_t s = 0; s < stages.size(); ++s) {
      auto& ctx = *stages[s];
      // Only the first stage reads tokens and only the last reads targets.
      ctx.begin(s == 0 ? std::span<const std::int32_t>(mbs[j].inputs) : none,
                s + 1 == stages.size() ? std::span<const std::int32_t>(mbs[j].targets) : none, normaliser);
      if (s > 0) copy_view(ctx.input_slot(), stages[s - 1]->output());
      for (int u = ctx.first_unit(); u < ctx.end_unit(); ++u)
        w.forward(u, workloads::unit_params_from_flat(layout, u, params), ctx);
    }
    loss += stages.back()->loss();
    for (std::size_t s = stages.size(); s-- > 0;) {
      auto& ctx = *stages[s];
      if (s + 1 < stages.size()) {
        const std::size_t boundary = static_cast<std::size_t>(ctx.boundary_shape().numel()) * dtype_size(params.dtype());
        const std::size_t before = alloc.stats().tag(AllocationTag::activation).requested_bytes;
        const TensorView slot = keep_output ? ctx.output_grad_slot_keeping_output() : ctx.output_grad_slot();
        // Dropping the output makes room for the slot; keeping it holds both until the backward below.
        EXPECT_EQ(alloc.stats().tag(AllocationTag::activation).requested_bytes, before + (keep_output ? boundary : 0));
        copy_view(slot, stages[s + 1]->input_grad());
      }
      for (int u = ctx.end_unit() - 1; u >= ctx.first_unit(); --u)
        w.backward(u, workloads::unit_params_from_flat(layout, u, params), ctx,
                   workloads::unit_grads_from_flat(layout, u, grads, j == 0));
    }
    // After the micro-batch only the input gradients of the later stages are still held.
    const Shape b = stages.front()->boundary_shape();
    EXPECT_EQ(alloc.stats().tag(AllocationTag::activation).requested_bytes,
              (stages.size() - 1) * static_cast<std::size_t>(b.numel()) * dtype_size(params.dtype()));
  }
  return loss;
}

TEST(LlamaStages, StagedRunEqualsTheWholeModelBitwise) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  for (bool tied : {true, false}) {
    const auto cfg = shrunk_llama(tied);  // units: embedding, block.0, block.1, head
    const auto model = workloads::make_llama(cfg, Precision::fp64);
    auto params = initial_params<double>(*model, 5);
    const auto mbs = split(random_sequences(4, cfg.seq_len, cfg.vocab, 11), 2, cfg.seq_len);
    const double norm = 4.0 * static_cast<double>(cfg.seq_len);
    const auto n = params.size();
    for (bool recompute : {false, true}) {
      std::vector<double> g_ref(n, 0.0);
      const double l_ref = run_micro_batches(*model, flat_view(params), flat_view(g_ref), mbs, norm, recompute, alloc);
      for (const std::vector<int>& cuts : std::vector<std::vector<int>>{{1}, {2}, {3}, {1, 3}, {1, 2, 3}})
        for (bool keep : {false, true}) {
          std::vector<double> g(n, -7.0);  // garbage: the first micro-batch must overwrite it
          const double l = run_stages(*model, flat_view(params), flat_view(g), mbs, norm, recompute, cuts, alloc, keep);
          std::string label = std::string(tied ? "tied" : "untied") + (recompute ? " recompute" : "") +
                              (keep ? " keeping outputs" : "") + " cuts";
          for (int c : cuts) label += " " + std::to_string(c);
          EXPECT_EQ(l, l_ref) << label;
          EXPECT_EQ(0, std::memcmp(g.data(), g_ref.data(), n * sizeof(double))) << label;
        }
    }
  }
}

TEST(LlamaStages, OrderChecksAreRelativeToTheRange) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto cfg = shrunk_llama(true);
  const auto model = workloads::make_llama(cfg, Precision::fp64);
  const auto& layout = model->layout();
  auto params = initial_params<double>(*model, 5);
  std::vector<double> grads(params.size(), 0.0);
  const auto batch = random_sequences(1, cfg.seq_len, cfg.vocab, 3);
  const auto pv = [&](int u) { return workloads::unit_params_from_flat(layout, u, flat_view(params)); };
  const auto gv = [&](int u) { return workloads::unit_grads_from_flat(layout, u, flat_view(grads), true); };

  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] { model->make_context(alloc, {.first_unit = 2, .end_unit = 2}); }, {"unit range [2, 2)", "[0, 4)"}));

  auto last = model->make_context(alloc, {.first_unit = 2});
  EXPECT_EQ(last->boundary_shape(), (Shape{cfg.seq_len, cfg.hidden}));
  last->begin({}, batch.targets, 8.0);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->forward(0, pv(0), *last); }, {"out of order", "forward(2)"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->forward(2, pv(2), *last); }, {"input_slot()"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)last->output(); }, {"ends at the last unit"}));

  auto first = model->make_context(alloc, {.first_unit = 0, .end_unit = 2});
  EXPECT_TRUE(throws_with<PreconditionError>([&] { first->begin({}, {}, 8.0); }, {"0 inputs"}));
  first->begin(batch.inputs, {}, 8.0);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)first->input_slot(); }, {"starts at unit 0"}));
  model->forward(0, pv(0), *first);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)first->output(); }, {"held from forward(1)"}));
  model->forward(1, pv(1), *first);
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->forward(2, pv(2), *first); }, {"out of order"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)first->loss_sum(); }, {"does not run"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { model->backward(1, pv(1), *first, gv(1)); },
                                             {"output_grad_slot()"}));
  EXPECT_EQ(first->output().shape(), (Shape{cfg.seq_len, cfg.hidden}));
  (void)first->output_grad_slot_keeping_output();
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)first->output_grad_slot(); }, {"taken once"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)first->output_grad_slot_keeping_output(); },
                                             {"taken once"}));
  EXPECT_TRUE(throws_with<PreconditionError>([&] { (void)last->output_grad_slot_keeping_output(); },
                                             {"ends at the last unit"}));
}

}  // namespace
}  // namespace hzp::test
