// Does the whole stack learn? Training runs through the `none` scheduler on synthetic Markov chains whose
// exact finite-context floor (the loss of a perfect model) and unigram entropy (the loss of the best
// context-free predictor) the data source computes. Each test is its own CTest entry (learning_order1,
// learning_order2, learning_order2_long, learning_tiny_moe) and prints its numbers.
//   order 1: learnable from the current token alone (embeddings, MLP, head);
//   order 2: needs the previous token too, so only attention with positions (RoPE) can reach the floor.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>

#include "hzp/core/clock.hpp"
#include "none_test_util.hpp"

namespace hzp::test {
namespace {

struct Outcome {
  double floor, unigram, final_loss, gap_closed, seconds;
};

Outcome train_and_measure(NoneRun& run, const char* label) {
  run.build();
  const auto ref = run.source->reference_losses();
  EXPECT_TRUE(ref.has_value());
  const Stopwatch sw;
  std::vector<double> losses;
  for (std::int64_t s = 0; s < run.train.steps; ++s) {
    const auto st = run.step();
    losses.push_back(st.loss);
    if (s % 50 == 0 || s == run.train.steps - 1)
      std::printf("[%s] step %4lld loss %.4f grad norm %.3f lr %.2e\n", label, static_cast<long long>(s), st.loss,
                  st.grad_norm, st.lr);
  }
  Outcome o{};
  o.seconds = sw.wall();
  o.floor = ref->floor;
  o.unigram = ref->unigram_entropy;
  o.final_loss = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10.0;
  o.gap_closed = (o.unigram - o.final_loss) / (o.unigram - o.floor);
  std::printf("[%s] %lld steps in %.1f s: floor %.4f, unigram entropy %.4f, mean loss of the last 10 steps %.4f "
              "(%.2f%% above the floor), %.1f%% of the unigram-to-floor gap closed\n",
              label, static_cast<long long>(run.train.steps), o.seconds, o.floor, o.unigram, o.final_loss,
              100.0 * (o.final_loss / o.floor - 1.0), 100.0 * o.gap_closed);
  return o;
}

// tiny with every default of its preset: order-1 chain over V = 64 with 4 successors, 300 steps.
TEST(Learning, Order1) {
  NoneRun run("tiny");
  const Outcome o = train_and_measure(run, "learning_order1");
  EXPECT_GE(o.final_loss, o.floor - 0.02);
  EXPECT_LE(o.final_loss, 1.03 * o.floor);
  EXPECT_GE(o.gap_closed, 0.97);
}

// tiny's shape over V = 16 with an order-2 chain (256 contexts, equal successor probabilities), at
// lr 1e-2: the measurement in docs/environment.md ("What the tiny model learns") came within 4-5% of the
// floor only with lr 1e-2 or ~1000 steps; here 1000 steps at 1e-2 end ~3% above it.
NoneRun order2_run(std::int64_t successors, std::int64_t steps) {
  NoneRun run("tiny");
  run.model_config.vocab = 16;
  run.chain.order = 2;
  run.chain.successors = successors;
  run.train.steps = steps;
  run.train.lr = 1e-2;
  run.train.lr_min = 1e-3;
  return run;
}

// CI: 3 successors per context.
TEST(Learning, Order2) {
  NoneRun run = order2_run(3, 1000);
  const Outcome o = train_and_measure(run, "learning_order2");
  EXPECT_GE(o.final_loss, o.floor - 0.02);
  EXPECT_LE(o.final_loss, 1.05 * o.floor);
}

// Label long: 4 successors per context (the top of issue 5's 2-4 range, the case measured in
// docs/environment.md).
TEST(Learning, Order2Long) {
  NoneRun run = order2_run(4, 1500);
  const Outcome o = train_and_measure(run, "learning_order2_long");
  EXPECT_GE(o.final_loss, o.floor - 0.02);
  EXPECT_LE(o.final_loss, 1.05 * o.floor);
}

// tiny-moe (tiny's shape, blocks 1-3 with 8 routed experts, top-2, and 1 shared) with every default of its preset:
// the order-1 chain, 300 steps, DeepSeek-V3's bias balancing at its rate 0.001. It must reach the floor like tiny,
// and the balancing must hold every MoE block's busiest expert within 1.5x the mean load of the last step.
TEST(Learning, TinyMoe) {
  NoneRun run("tiny-moe");
  const Outcome o = train_and_measure(run, "learning_tiny_moe");
  EXPECT_GE(o.final_loss, o.floor - 0.02);
  EXPECT_LE(o.final_loss, 1.03 * o.floor);
  bool found = false;
  for (const workloads::StepMetric& m : run.model->step_metrics()) {
    if (m.name == "moe/load_max_over_mean") {
      found = true;
      ASSERT_EQ(m.values.size(), 3u);
      for (std::size_t l = 0; l < m.values.size(); ++l) {
        std::printf("[learning_tiny_moe] MoE block %zu: load max/mean %.3f\n", l, m.values[l]);
        EXPECT_LT(m.values[l], 1.5) << "MoE block " << l;
        EXPECT_GE(m.values[l], 1.0);
      }
    }
    if (m.name == "moe/load") {  // every assignment of the last step counted: 16 sequences x 64 tokens x top-2
      const double total = std::accumulate(m.values.begin(), m.values.end(), 0.0);
      EXPECT_EQ(total, 3.0 * 16 * 64 * 2);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace hzp::test
