// GPU tests: the CUDA twin of the vocabulary-parallel embedding and cross-entropy (kernels/vocab_parallel)
// against its CPU launchers on the same inputs (fp32, bf16): the per-slice statistics (row maxima and
// target logits exact, exp sums close), the backward out of place and in place over the logits, the loss
// from the combined statistics, and the embedding's range lookup and gradient rows. The CPU is the oracle;
// the split is combined on the host from the CPU's statistics (the GPU's are checked equal or close first).
#include <gtest/gtest.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/vocab_parallel.hpp"
#include "kernel_test_util.hpp"
#include "vocab_parallel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::columns;
using test::convert;
using test::cview;
using test::describe;
using test::rows_of;
using test::Slice;
using test::slices_of;
using test::view;
using test::vocab_parallel_ce;

const StreamRef kHost = StreamRef::host();

// Gradients: fp32 differs by the exp and log implementations only (a few 1e-7 relative in each
// probability; the atol covers p − 1 for a target of probability near 1, where that is absolute; the
// scale is 1/18 here); bf16 by rare one-ulp rounding flips (2^-7 relative at most) of such values.
template <typename T>
::testing::AssertionResult close_grad(const std::vector<T>& gpu, const std::vector<T>& cpu) {
  if constexpr (std::is_same_v<T, bf16>) return test::all_close(gpu, cpu, 1.0 / 128, 1e-9);
  else return test::all_close(gpu, cpu, 2e-5, 1e-7);
}

template <typename T>
class CudaVocabParallel : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaVocabParallel, FloatTypes);

TYPED_TEST(CudaVocabParallel, CrossEntropyMatchesTheCpuLaunchers) {
  using T = TypeParam;
  test::Gpu gpu;
  // 37 over 13+12+12 (rows that are not 16-byte multiples), and 3000 over slices of 16-byte rows (packs).
  for (const auto& split : {slices_of({13, 12, 12}), slices_of({1024, 1032, 944})}) {
    SCOPED_TRACE(describe(split));
    const std::int64_t N = 7, V = split.back().begin + split.back().size;
    const auto logits = convert<T>(test::random_normal<double>(static_cast<std::size_t>(N * V), 40, 0.0, 3.0));
    auto targets = test::random_ints(static_cast<std::size_t>(N), 41, 0, static_cast<std::int32_t>(V - 1));
    targets[0] = 0;
    targets[1] = static_cast<std::int32_t>(V - 1);
    targets[4] = -100;
    const CrossEntropyGrad g{-100, 9.0, 0.5};
    const auto cpu = vocab_parallel_ce(logits, targets, V, split, g);
    auto gt = gpu.upload(targets, {N});
    auto gmax = gpu.upload(cpu.global_max, {N});
    auto gsum = gpu.upload(cpu.global_sum_exp, {N});
    auto gtl = gpu.upload(cpu.global_target_logit, {N});
    for (const Slice& s : split) {
      const auto local = columns(logits, N, V, s);
      std::vector<float> row_max(N), target_logit(N), sum_exp(N);
      vocab_parallel_ce_local_stats(view(row_max, {N}), view(target_logit, {N}), cview(local, {N, s.size}),
                                    cview(targets, {N}), s.begin, -100, kHost);
      vocab_parallel_ce_sum_exp(view(sum_exp, {N}), cview(local, {N, s.size}), cview(cpu.global_max, {N}), kHost);
      auto gx = gpu.upload(local, {N, s.size});
      auto grm = gpu.empty({N}, DType::f32);
      auto gtg = gpu.empty({N}, DType::f32);
      auto gse = gpu.empty({N}, DType::f32);
      vocab_parallel_ce_local_stats(grm.view, gtg.view, gx.view, gt.view, s.begin, -100, gpu.stream());
      vocab_parallel_ce_sum_exp(gse.view, gx.view, gmax.view, gpu.stream());
      EXPECT_EQ(gpu.download<float>(grm.view), row_max) << "slice at " << s.begin;  // maxima and picks are exact
      EXPECT_EQ(gpu.download<float>(gtg.view), target_logit) << "slice at " << s.begin;
      EXPECT_TRUE(test::all_close(gpu.download<float>(gse.view), sum_exp, 1e-6, 0.0)) << "slice at " << s.begin;

      std::vector<T> d(local.size());
      vocab_parallel_ce_bwd(view(d, {N, s.size}), cview(local, {N, s.size}), cview(targets, {N}), s.begin,
                            cview(cpu.global_max, {N}), cview(cpu.global_sum_exp, {N}), g, kHost);
      auto gd = gpu.empty({N, s.size}, dtype_of_v<T>);
      vocab_parallel_ce_bwd(gd.view, gx.view, gt.view, s.begin, gmax.view, gsum.view, g, gpu.stream());
      EXPECT_TRUE(close_grad(gpu.download<T>(gd.view), d)) << "slice at " << s.begin;
      // In place over the logits, as the model calls it.
      vocab_parallel_ce_bwd(gx.view, gx.view, gt.view, s.begin, gmax.view, gsum.view, g, gpu.stream());
      EXPECT_TRUE(close_grad(gpu.download<T>(gx.view), d)) << "in place, slice at " << s.begin;
    }
    auto gl = gpu.empty({N}, DType::f32);
    const auto r = vocab_parallel_ce_loss(gl.view, gmax.view, gsum.view, gtl.view, gt.view, -100, gpu.stream());
    EXPECT_EQ(r.n_valid, cpu.result.n_valid);
    EXPECT_NEAR(r.loss_sum, cpu.result.loss_sum, 1e-6 * cpu.result.loss_sum);
    EXPECT_TRUE(test::all_close(gpu.download<float>(gl.view), cpu.losses, 1e-6, 1e-7));
  }
}

TYPED_TEST(CudaVocabParallel, EmbeddingMatchesTheCpuLaunchers) {
  using T = TypeParam;
  test::Gpu gpu;
  const std::int64_t V = 50, N = 40;
  for (std::int64_t D : {std::int64_t{72}, std::int64_t{5}}) {  // 16-byte rows (packs), then odd rows
    const auto table = test::random_normal<T>(static_cast<std::size_t>(V * D), 42);
    const auto ids = test::random_ints(static_cast<std::size_t>(N), 43, 0, static_cast<std::int32_t>(V - 1));
    const auto dout = test::random_normal<T>(static_cast<std::size_t>(N * D), 44);
    auto gids = gpu.upload(ids, {N});
    auto gdo = gpu.upload(dout, {N, D});
    for (const Slice& s : slices_of({17, 33})) {
      SCOPED_TRACE(::testing::Message() << "D=" << D << ", slice at " << s.begin);
      const auto rows = rows_of(table, D, s);
      std::vector<T> out(static_cast<std::size_t>(N * D));
      embedding_fwd_vocab_range(view(out, {N, D}), cview(ids, {N}), cview(rows, {s.size, D}), s.begin, kHost);
      auto grows = gpu.upload(rows, {s.size, D});
      auto gout = gpu.empty({N, D}, dtype_of_v<T>);
      embedding_fwd_vocab_range(gout.view, gids.view, grows.view, s.begin, gpu.stream());
      EXPECT_TRUE(test::all_close(gpu.download<T>(gout.view), out, 0, 0));  // copies and zeros: exact
      for (bool accumulate : {false, true}) {
        const auto start = test::random_normal<float>(static_cast<std::size_t>(s.size * D), 45);
        auto grad = start;
        embedding_bwd_vocab_range(view(grad, {s.size, D}), cview(ids, {N}), cview(dout, {N, D}), s.begin, accumulate,
                                  kHost);
        auto ggrad = gpu.upload(start, {s.size, D});
        embedding_bwd_vocab_range(ggrad.view, gids.view, gdo.view, s.begin, accumulate, gpu.stream());
        EXPECT_TRUE(test::all_close(gpu.download<float>(ggrad.view), grad, 1e-5, 1e-6)) << "accumulate=" << accumulate;
      }
    }
  }
}

}  // namespace
}  // namespace hzp::kernels
