// The CPU launchers split over the intra-op pool (core/intra_op.hpp) compute what their single-thread reference
// loops compute: for 2 to 16 threads (the GPU machine's core count) every element-wise, row and attention kernel is bitwise equal to the same
// launcher at one thread (which runs the reference templates over the whole tensor), the loss sum of the
// cross-entropy included; the GEMM split by column and row blocks matches the triple-loop reference and, for each
// element, one BLAS dot product over the whole of K. Shapes are chosen so ranges end inside tiles and blocks.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "gemm/gemm_ref.hpp"
#include "hzp/core/intra_op.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/add.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/gemm.hpp"
#include "hzp/kernels/rmsnorm.hpp"
#include "hzp/kernels/rope.hpp"
#include "hzp/kernels/swiglu.hpp"

namespace hzp::kernels {
namespace {

using Buffers = std::vector<std::vector<float>>;

std::vector<float> random_floats(std::int64_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(gen);
  return v;
}

// Runs `kernel` on fresh copies of `inputs` at 1 to 16 pool threads (7: ragged ranges) and expects every buffer bitwise equal to
// the one-thread run's. The pool goes back to one thread afterwards.
void expect_thread_count_invariant(const Buffers& inputs, const std::function<void(Buffers&)>& kernel) {
  Buffers one = inputs;
  core::set_intra_op_threads(1);
  kernel(one);
  for (int threads : {2, 3, 4, 7, 8, 16}) {
    core::set_intra_op_threads(threads);
    Buffers many = inputs;
    kernel(many);
    for (std::size_t b = 0; b < one.size(); ++b)
      ASSERT_EQ(std::memcmp(one[b].data(), many[b].data(), one[b].size() * sizeof(float)), 0)
          << "buffer " << b << " differs at " << threads << " threads";
  }
  core::set_intra_op_threads(1);
}

TensorView view(std::vector<float>& v, Shape s) { return TensorView(v.data(), s, DType::f32); }

TEST(IntraOpKernels, ElementWiseKernels) {
  const std::int64_t n = 3 * (std::int64_t{1} << 15) + 77;  // several grains, a ragged end
  expect_thread_count_invariant({random_floats(n, 1), random_floats(n, 2), random_floats(n, 3), random_floats(n, 4),
                                 random_floats(n, 5)},
                                [&](Buffers& b) {
                                  swiglu_fwd(view(b[2], Shape{1, n}), view(b[0], Shape{1, n}),
                                             view(b[1], Shape{1, n}), StreamRef::host());
                                  swiglu_bwd(view(b[3], Shape{1, n}), view(b[4], Shape{1, n}), view(b[2], Shape{1, n}),
                                             view(b[0], Shape{1, n}), view(b[1], Shape{1, n}), StreamRef::host());
                                  add(view(b[0], Shape{n}), view(b[3], Shape{n}), view(b[4], Shape{n}),
                                      StreamRef::host());
                                });
}

TEST(IntraOpKernels, AdamW) {
  const std::int64_t n = 5 * (std::int64_t{1} << 15) + 3;
  std::vector<float> v0 = random_floats(n, 9, 0.0f, 0.01f);
  expect_thread_count_invariant({random_floats(n, 6), random_floats(n, 7, -0.01f, 0.01f), v0, random_floats(n, 8)},
                                [&](Buffers& b) {
                                  AdamWHyper h{.lr = 1e-3, .weight_decay = 0.1, .step = 3, .grad_scale = 0.5};
                                  adamw_step(view(b[0], Shape{n}), view(b[1], Shape{n}), view(b[2], Shape{n}),
                                             view(b[3], Shape{n}), h, StreamRef::host());
                                });
}

TEST(IntraOpKernels, RmsNormForwardAndBackward) {
  const std::int64_t rows = 301, dim = 448;  // row ranges end mid-grain; dw's column split does too
  expect_thread_count_invariant(
      {random_floats(rows * dim, 10), random_floats(dim, 11), random_floats(rows * dim, 12),
       std::vector<float>(static_cast<std::size_t>(rows * dim)), std::vector<float>(static_cast<std::size_t>(rows)),
       std::vector<float>(static_cast<std::size_t>(rows * dim)), random_floats(dim, 13)},
      [&](Buffers& b) {
        rmsnorm_fwd(view(b[3], Shape{rows, dim}), view(b[4], Shape{rows}), view(b[0], Shape{rows, dim}),
                    view(b[1], Shape{dim}), 1e-5f, StreamRef::host());
        // accumulate = true: dw adds to what b[6] held, in row order
        rmsnorm_bwd(view(b[5], Shape{rows, dim}), view(b[6], Shape{dim}), view(b[2], Shape{rows, dim}),
                    view(b[0], Shape{rows, dim}), view(b[1], Shape{dim}), view(b[4], Shape{rows}), true,
                    StreamRef::host());
      });
}

TEST(IntraOpKernels, RopeForwardAndBackward) {
  const std::int64_t seq = 208, tokens = 4 * seq, heads = 8, dim = 64;  // 2 and 3 ranges split sequences
  const Shape s{tokens, heads, dim};
  expect_thread_count_invariant({random_floats(tokens * heads * dim, 23), random_floats(tokens * heads * dim, 24)},
                                [&](Buffers& b) {
                                  rope_fwd(view(b[0], s), view(b[0], s), seq, 10000.0, StreamRef::host());
                                  rope_bwd(view(b[1], s), view(b[1], s), seq, 10000.0, StreamRef::host());
                                });
}

TEST(IntraOpKernels, CrossEntropyRowsAndLossSum) {
  const std::int64_t rows = 37, vocab = 3000;
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) targets[static_cast<std::size_t>(r)] = r % 5 == 0 ? -1 : (r * 97) % vocab;
  const ConstTensorView t(targets.data(), Shape{rows}, DType::i32);
  std::vector<double> sums;
  expect_thread_count_invariant(
      {random_floats(rows * vocab, 14, -4.0f, 4.0f), std::vector<float>(static_cast<std::size_t>(rows)),
       std::vector<float>(static_cast<std::size_t>(rows * vocab)), std::vector<float>(static_cast<std::size_t>(rows)),
       random_floats(rows * vocab, 15, -4.0f, 4.0f), std::vector<float>(static_cast<std::size_t>(rows))},
      [&](Buffers& b) {
        const CrossEntropyGrad g{.ignore_index = -1, .normaliser = 30.0, .dloss = 1.0};
        const CrossEntropyResult f = cross_entropy_fwd(view(b[1], Shape{rows}), view(b[0], Shape{rows, vocab}), t, -1,
                                                       StreamRef::host());
        cross_entropy_bwd(view(b[2], Shape{rows, vocab}), view(b[0], Shape{rows, vocab}), t, g, StreamRef::host());
        // fwd_bwd in place: dlogits aliases the logits, each row read before it is written
        const CrossEntropyResult fb = cross_entropy_fwd_bwd(view(b[3], Shape{rows}), view(b[4], Shape{rows, vocab}),
                                                            view(b[4], Shape{rows, vocab}), t, g, StreamRef::host());
        sums.push_back(f.loss_sum);
        sums.push_back(fb.loss_sum);
        EXPECT_EQ(f.n_valid, rows - 8);
        EXPECT_EQ(fb.n_valid, rows - 8);
      });
  ASSERT_EQ(sums.size(), 14u);  // one-thread run and 6 thread counts, two sums each
  for (std::size_t i = 2; i < sums.size(); ++i) EXPECT_EQ(sums[i], sums[i % 2]) << "loss sum of run " << i / 2;
}

TEST(IntraOpKernels, AttentionForwardAndBackward) {
  const AttentionDims d{.batch = 2, .seq = 100, .heads = 6, .kv_heads = 3, .head_dim = 16};
  const std::int64_t qn = d.batch * d.seq * d.heads * d.head_dim, kn = d.batch * d.seq * d.kv_heads * d.head_dim;
  const std::int64_t rows = d.batch * d.heads * d.seq;
  const Shape qs{d.batch * d.seq, d.heads * d.head_dim}, ks{d.batch * d.seq, d.kv_heads * d.head_dim};
  expect_thread_count_invariant(
      {random_floats(qn, 16), random_floats(kn, 17), random_floats(kn, 18), random_floats(qn, 19),
       std::vector<float>(static_cast<std::size_t>(qn)), std::vector<float>(static_cast<std::size_t>(rows)),
       std::vector<float>(static_cast<std::size_t>(qn)), std::vector<float>(static_cast<std::size_t>(kn)),
       std::vector<float>(static_cast<std::size_t>(kn))},
      [&](Buffers& b) {
        // The workspace is sized at the current thread count: one slice per range.
        std::vector<std::byte> wf(attention_fwd_workspace_bytes(d, DType::f32));
        std::vector<std::byte> wb(attention_bwd_workspace_bytes(d, DType::f32));
        attention_fwd(view(b[4], qs), TensorView(b[5].data(), Shape{d.batch, d.heads, d.seq}, DType::f32),
                      view(b[0], qs), view(b[1], ks), view(b[2], ks), d, wf, StreamRef::host());
        attention_bwd(view(b[6], qs), view(b[7], ks), view(b[8], ks), view(b[3], qs), view(b[0], qs), view(b[1], ks),
                      view(b[2], ks), view(b[4], qs), TensorView(b[5].data(), Shape{d.batch, d.heads, d.seq}, DType::f32),
                      d, wb, StreamRef::host());
      });
}

TEST(IntraOpKernels, AttentionWorkspaceGrowsWithTheRanges) {
  const AttentionDims d{.batch = 1, .seq = 64, .heads = 4, .kv_heads = 2, .head_dim = 16};
  const std::size_t f1 = attention_fwd_workspace_bytes(d, DType::f32), b1 = attention_bwd_workspace_bytes(d, DType::f32);
  core::set_intra_op_threads(3);
  EXPECT_EQ(attention_fwd_workspace_bytes(d, DType::f32), 3 * f1);  // 4 (sequence, head) items: 3 ranges
  EXPECT_EQ(attention_bwd_workspace_bytes(d, DType::f32), 2 * b1);  // 2 (sequence, kv head) items: 2 ranges
  core::set_intra_op_threads(1);
}

// Each GEMM orientation the model uses, split by columns (N >= M) and by rows (M > N), against the triple loop
// and against one unsplit BLAS call.
TEST(IntraOpKernels, GemmSplitByColumnsAndRows) {
  struct Case {
    std::int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case c : {Case{37, 333, 50, false, true}, Case{37, 333, 50, false, false}, Case{333, 37, 50, true, false},
                       Case{200, 129, 64, true, true}}) {
    const auto a = random_floats(c.m * c.k, 20), b = random_floats(c.k * c.n, 21), c0 = random_floats(c.m * c.n, 22);
    const Shape as = c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, bs = c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
    std::vector<float> ref = c0;
    gemm_ref<float>(ref.data(), a.data(), b.data(), c.m, c.n, c.k, c.ta, c.tb, 0.5f, 1.0f);
    std::vector<float> blas = c0;
    cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(c.m), static_cast<int>(c.n), static_cast<int>(c.k), 0.5f, a.data(),
                static_cast<int>(as[1]), b.data(), static_cast<int>(bs[1]), 1.0f, blas.data(), static_cast<int>(c.n));
    for (int threads : {2, 3, 4, 7, 8, 16}) {
      core::set_intra_op_threads(threads);
      std::vector<float> got = c0;
      gemm(TensorView(got.data(), Shape{c.m, c.n}, DType::f32), ConstTensorView(a.data(), as, DType::f32),
           ConstTensorView(b.data(), bs, DType::f32), c.ta, c.tb, 0.5f, 1.0f, {}, StreamRef::host());
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], 1e-4f * (1.0f + std::abs(ref[i])))
            << "element " << i << " m=" << c.m << " n=" << c.n << " threads=" << threads;
        ASSERT_NEAR(got[i], blas[i], 1e-5f * (1.0f + std::abs(blas[i]))) << "element " << i;
      }
    }
    core::set_intra_op_threads(1);
  }
}

}  // namespace
}  // namespace hzp::kernels
