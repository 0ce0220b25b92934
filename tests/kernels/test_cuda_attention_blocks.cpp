// GPU tests of the blocked attention's CUDA twin (attention_blocks.cu; what ring attention runs for context
// parallelism): each launcher on a CUDA stream against the CPU launcher on the same inputs (state, out, lse, Δ,
// dq, dk, dv), at grouped-query shapes, block lengths that are not multiples of the CPU's 64-row tiles, the causal
// diagonal pair, off-diagonal, partly and fully masked pairs, a non-causal pair and document masks; and a whole
// sequence cut into blocks, folded pair by pair and finished, against the unfused CUDA attention on the whole
// sequence (forward and backward). Tolerances: the unfused twin's (test_cuda_matmul.cpp): fp32 rel L2 1e-5, bf16
// 1.5e-2 (bf16 probabilities before the GEMMs; the CPU keeps them in fp32); per-row statistics 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "kernel_test_util.hpp"

namespace hzp::test {
namespace {

using kernels::AttentionBlock;
using kernels::AttentionBlockAccumulate;
using kernels::AttentionDims;

const StreamRef kHost = StreamRef::host();

std::span<std::byte> bytes(std::vector<std::byte>& v) { return {v.data(), v.size()}; }
std::span<std::byte> bytes(DeviceTensor& d) { return {static_cast<std::byte*>(d.view.data()), d.view.bytes()}; }
std::span<const std::int32_t> ints(const DeviceTensor& d, std::size_t n) {
  return {static_cast<const std::int32_t*>(d.view.data()), n};
}

template <typename T>
double tol() {
  return std::is_same_v<T, bf16> ? 1.5e-2 : 1e-5;
}

/// One pair's shapes.
struct Shapes {
  Shape q, kv, rows;
  explicit Shapes(const AttentionBlock& b)
      : q{b.batch, b.q_len, b.heads, b.head_dim}, kv{b.batch, b.k_len, b.kv_heads, b.head_dim},
        rows{b.batch, b.heads, b.q_len} {}
};

/// The online-softmax state of a query block and its finished out and lse, on the host.
template <typename T>
struct State {
  std::vector<float> acc, m, l, lse;
  std::vector<T> out;
};

/// Random inputs of one pair (q, dout of the query block; k, v of the key block) and, when documents are given,
/// the query rows' global document starts ([B, Tq]).
template <typename T>
struct PairInputs {
  std::vector<T> q, k, v, k2, v2, dout;
  std::vector<std::int32_t> first;
  PairInputs(const AttentionBlock& b, std::uint64_t seed) {
    const Shapes s(b);
    q = random_normal<T>(static_cast<std::size_t>(s.q.numel()), seed);
    k = random_normal<T>(static_cast<std::size_t>(s.kv.numel()), seed + 1);
    v = random_normal<T>(static_cast<std::size_t>(s.kv.numel()), seed + 2);
    k2 = random_normal<T>(static_cast<std::size_t>(s.kv.numel()), seed + 3, 0.0, 2.0);  // moves the row maxima
    v2 = random_normal<T>(static_cast<std::size_t>(s.kv.numel()), seed + 4);
    dout = random_normal<T>(static_cast<std::size_t>(s.q.numel()), seed + 5);
  }
};

/// Folds (k, v) then (k2, v2) of the same key positions into a fresh state and finishes it, on the CPU or the GPU
/// (the second fold rescales what the first left: the running max moves). Returns the state after both folds.
template <typename T>
State<T> fold_twice(Gpu* gpu, const AttentionBlock& b, const PairInputs<T>& in) {
  const Shapes s(b);
  const std::size_t nq = static_cast<std::size_t>(s.q.numel()), nr = static_cast<std::size_t>(s.rows.numel());
  State<T> st{std::vector<float>(nq), std::vector<float>(nr), std::vector<float>(nr), std::vector<float>(nr),
              std::vector<T>(nq)};
  if (gpu == nullptr) {
    std::vector<std::byte> ws(kernels::attention_block_fwd_workspace_bytes(b, dtype_of_v<T>, Device::cpu()));
    kernels::attention_block_state_init(view(st.acc, s.q), view(st.m, s.rows), view(st.l, s.rows), b.q_dims(), kHost);
    for (const auto* kv : {&in.k, &in.k2}) {
      const auto& vv = kv == &in.k ? in.v : in.v2;
      kernels::attention_block_fwd(view(st.acc, s.q), view(st.m, s.rows), view(st.l, s.rows), cview(in.q, s.q),
                                   cview(*kv, s.kv), cview(vv, s.kv), b, bytes(ws), kHost, in.first);
    }
    kernels::attention_block_finish(view(st.out, s.q), view(st.lse, s.rows), cview(st.acc, s.q), cview(st.m, s.rows),
                                    cview(st.l, s.rows), b.q_dims(), kHost);
    return st;
  }
  const StreamRef gs = gpu->stream();
  auto acc = gpu->empty(s.q, DType::f32), m = gpu->empty(s.rows, DType::f32), l = gpu->empty(s.rows, DType::f32);
  auto out = gpu->empty(s.q, dtype_of_v<T>), lse = gpu->empty(s.rows, DType::f32);
  auto q = gpu->upload(in.q, s.q);
  auto ws = gpu->empty({static_cast<std::int64_t>(
                           kernels::attention_block_fwd_workspace_bytes(b, dtype_of_v<T>, gpu->device()))},
                       DType::u8);
  const bool masked = !in.first.empty();
  auto first = gpu->upload(masked ? in.first : std::vector<std::int32_t>{0}, {masked ? s.q[0] * s.q[1] : 1});
  const std::span<const std::int32_t> dev_first = masked ? ints(first, in.first.size()) : std::span<const std::int32_t>{};
  kernels::attention_block_state_init(acc.view, m.view, l.view, b.q_dims(), gs);
  for (const auto* kv : {&in.k, &in.k2}) {
    auto k = gpu->upload(*kv, s.kv);
    auto v = gpu->upload(kv == &in.k ? in.v : in.v2, s.kv);
    kernels::attention_block_fwd(acc.view, m.view, l.view, q.view, k.view, v.view, b, bytes(ws), gs, dev_first);
  }
  kernels::attention_block_finish(out.view, lse.view, acc.view, m.view, l.view, b.q_dims(), gs);
  return {gpu->download<float>(acc.view), gpu->download<float>(m.view), gpu->download<float>(l.view),
          gpu->download<float>(lse.view), gpu->download<T>(out.view)};
}

/// The pairs every per-pair test runs (B, Tq, Tk, H, KV, D, q_pos0, k_pos0, causal): grouped-query heads throughout.
std::vector<AttentionBlock> pairs() {
  return {
      {2, 77, 77, 4, 2, 16, 77, 77, true},    // the diagonal pair, 77 rows (not a multiple of 64)
      {1, 50, 30, 4, 1, 32, 100, 20, true},   // off-diagonal, every key visible
      {1, 40, 60, 2, 2, 16, 30, 0, true},     // the key block reaches past the first queries: partly masked
      {1, 33, 47, 4, 2, 8, 0, 100, false},    // non-causal: every key, wherever it sits
  };
}

/// Document starts for a pair at q_pos0 = 64, k_pos0 = 24: sequence 0's documents start at 0, 30, 70 and 90, so
/// its rows before 70 see keys 30..63 of the block and the later ones none; sequence 1's at 0 and 100.
std::vector<std::int32_t> documents(const AttentionBlock& b) {
  const std::vector<std::vector<std::int32_t>> starts = {{0, 30, 70, 90}, {0, 100}};
  std::vector<std::int32_t> first;
  for (std::int64_t s = 0; s < b.batch; ++s)
    for (std::int64_t i = 0; i < b.q_len; ++i) {
      std::int32_t f = 0;
      for (std::int32_t st : starts[static_cast<std::size_t>(s % 2)])
        if (st <= b.q_pos0 + i) f = st;
      first.push_back(f);
    }
  return first;
}
const AttentionBlock kDocumentPair{2, 48, 40, 4, 2, 16, 64, 24, true};

std::string name_of(const AttentionBlock& b) {
  return "pair q_pos0=" + std::to_string(b.q_pos0) + " k_pos0=" + std::to_string(b.k_pos0) +
         (b.causal ? "" : " non-causal");
}

/// −inf (a row that saw no key: its running max and lse) as a finite stand-in, so all_close compares it exactly.
std::vector<float> finite(std::vector<float> x) {
  for (float& e : x)
    if (e == -std::numeric_limits<float>::infinity()) e = -1e30f;
  return x;
}

template <typename T>
void expect_states_match(const State<T>& got, const State<T>& want, const std::string& what) {
  EXPECT_TRUE(rel_l2_close(got.acc, want.acc, tol<T>())) << what << ": acc";
  EXPECT_TRUE(all_close(finite(got.m), finite(want.m), 1e-5, 1e-5)) << what << ": row_max";
  EXPECT_TRUE(all_close(got.l, want.l, 1e-5, 1e-5)) << what << ": row_sum";
  EXPECT_TRUE(rel_l2_close(got.out, want.out, tol<T>())) << what << ": out";
  EXPECT_TRUE(all_close(finite(got.lse), finite(want.lse), 1e-5, 1e-5)) << what << ": lse";
}

template <typename T>
class CudaAttentionBlocks : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaAttentionBlocks, FloatTypes);

TYPED_TEST(CudaAttentionBlocks, ForwardOfOnePairMatchesTheCpu) {
  using T = TypeParam;
  Gpu gpu;
  std::uint64_t seed = 40;
  for (const AttentionBlock& b : pairs()) {
    const PairInputs<T> in(b, seed += 10);
    expect_states_match(fold_twice<T>(&gpu, b, in), fold_twice<T>(nullptr, b, in), name_of(b));
  }
  PairInputs<T> in(kDocumentPair, 90);
  in.first = documents(kDocumentPair);
  const State<T> got = fold_twice<T>(&gpu, kDocumentPair, in), want = fold_twice<T>(nullptr, kDocumentPair, in);
  expect_states_match(got, want, "documents");
  // Sequence 0's row 70 (i = 6) starts a document after every key of the block: it saw nothing, out 0, lse −inf.
  for (std::int64_t h = 0; h < kDocumentPair.heads; ++h) {
    EXPECT_EQ(got.l[static_cast<std::size_t>(h * kDocumentPair.q_len + 6)], 0.f);
    EXPECT_EQ(got.lse[static_cast<std::size_t>(h * kDocumentPair.q_len + 6)], -std::numeric_limits<float>::infinity());
  }
}

// A fully masked pair (every query before every key) leaves the state as it was, bit for bit.
TYPED_TEST(CudaAttentionBlocks, FullyMaskedPairChangesNothing) {
  using T = TypeParam;
  Gpu gpu;
  const AttentionBlock seen{1, 16, 16, 2, 1, 16, 0, 0, true}, hidden{1, 16, 16, 2, 1, 16, 0, 32, true};
  ASSERT_TRUE(hidden.fully_masked());
  const PairInputs<T> in(seen, 7);
  const Shapes s(seen);
  auto acc = gpu.empty(s.q, DType::f32), m = gpu.empty(s.rows, DType::f32), l = gpu.empty(s.rows, DType::f32);
  auto q = gpu.upload(in.q, s.q), k = gpu.upload(in.k, s.kv), v = gpu.upload(in.v, s.kv);
  auto ws = gpu.empty({static_cast<std::int64_t>(
                          kernels::attention_block_fwd_workspace_bytes(seen, dtype_of_v<T>, gpu.device()))},
                      DType::u8);
  kernels::attention_block_state_init(acc.view, m.view, l.view, seen.q_dims(), gpu.stream());
  kernels::attention_block_fwd(acc.view, m.view, l.view, q.view, k.view, v.view, seen, bytes(ws), gpu.stream());
  const auto acc0 = gpu.download<float>(acc.view), m0 = gpu.download<float>(m.view), l0 = gpu.download<float>(l.view);
  kernels::attention_block_fwd(acc.view, m.view, l.view, q.view, k.view, v.view, hidden, bytes(ws), gpu.stream());
  EXPECT_EQ(gpu.download<float>(acc.view), acc0);
  EXPECT_EQ(gpu.download<float>(m.view), m0);
  EXPECT_EQ(gpu.download<float>(l.view), l0);
}

/// The pair's backward on the CPU and the GPU from the CPU's lse and Δ of the pair's own forward, overwriting
/// (GPU outputs poisoned with NaN first) or adding into the same random gradients; Δ is checked on the way.
template <typename T>
void expect_pair_backward_matches(Gpu& gpu, const AttentionBlock& b, const PairInputs<T>& in,
                                  AttentionBlockAccumulate acc, const std::string& what) {
  const Shapes s(b);
  const State<T> fwd = fold_twice<T>(nullptr, b, in);
  std::vector<float> delta(fwd.lse.size());
  kernels::attention_row_delta(view(delta, s.rows), cview(in.dout, s.q), cview(fwd.out, s.q), b.q_dims(), kHost);
  auto gdelta = gpu.empty(s.rows, DType::f32);
  auto gdout = gpu.upload(in.dout, s.q), gout = gpu.upload(fwd.out, s.q);
  kernels::attention_row_delta(gdelta.view, gdout.view, gout.view, b.q_dims(), gpu.stream());
  EXPECT_TRUE(all_close(gpu.download<float>(gdelta.view), delta, 1e-5, 1e-5)) << what << ": delta";

  const auto start = [&](const Shape& sh, std::uint64_t seed) {
    return acc.dq || acc.dkv ? random_normal<T>(static_cast<std::size_t>(sh.numel()), seed)
                             : std::vector<T>(static_cast<std::size_t>(sh.numel()), from_double<T>(NAN));
  };
  std::vector<T> dq = start(s.q, 61), dk = start(s.kv, 62), dv = start(s.kv, 63);
  auto gdq = gpu.upload(dq, s.q), gdk = gpu.upload(dk, s.kv), gdv = gpu.upload(dv, s.kv);
  std::vector<std::byte> ws(kernels::attention_block_bwd_workspace_bytes(b, dtype_of_v<T>, Device::cpu()));
  kernels::attention_block_bwd(view(dq, s.q), view(dk, s.kv), view(dv, s.kv), cview(in.dout, s.q), cview(in.q, s.q),
                               cview(in.k2, s.kv), cview(in.v2, s.kv), cview(fwd.lse, s.rows), cview(delta, s.rows), b,
                               acc, bytes(ws), kHost, in.first);
  const bool masked = !in.first.empty();
  auto first = gpu.upload(masked ? in.first : std::vector<std::int32_t>{0}, {masked ? s.q[0] * s.q[1] : 1});
  auto gq = gpu.upload(in.q, s.q), gk = gpu.upload(in.k2, s.kv), gv = gpu.upload(in.v2, s.kv);
  auto glse = gpu.upload(fwd.lse, s.rows), gd = gpu.upload(delta, s.rows);
  auto gws = gpu.empty({static_cast<std::int64_t>(
                           kernels::attention_block_bwd_workspace_bytes(b, dtype_of_v<T>, gpu.device()))},
                       DType::u8);
  kernels::attention_block_bwd(gdq.view, gdk.view, gdv.view, gdout.view, gq.view, gk.view, gv.view, glse.view,
                               gd.view, b, acc, bytes(gws), gpu.stream(),
                               masked ? ints(first, in.first.size()) : std::span<const std::int32_t>{});
  EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdq.view), dq, tol<T>())) << what << ": dq";
  EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdk.view), dk, tol<T>())) << what << ": dk";
  EXPECT_TRUE(rel_l2_close(gpu.download<T>(gdv.view), dv, tol<T>())) << what << ": dv";
}

TYPED_TEST(CudaAttentionBlocks, BackwardOfOnePairMatchesTheCpu) {
  using T = TypeParam;
  Gpu gpu;
  std::uint64_t seed = 140;
  for (const AttentionBlock& b : pairs()) {
    const PairInputs<T> in(b, seed += 10);
    expect_pair_backward_matches<T>(gpu, b, in, {}, name_of(b) + " overwrite");
    expect_pair_backward_matches<T>(gpu, b, in, {.dq = true, .dkv = true}, name_of(b) + " accumulate");
  }
  PairInputs<T> in(kDocumentPair, 190);
  in.first = documents(kDocumentPair);
  expect_pair_backward_matches<T>(gpu, kDocumentPair, in, {}, "documents overwrite");
  expect_pair_backward_matches<T>(gpu, kDocumentPair, in, {.dq = true, .dkv = false}, "documents dq accumulate");
}

// The overwrite contract of a pair with nothing to do: what is not accumulated becomes 0, the rest stays.
TYPED_TEST(CudaAttentionBlocks, FullyMaskedPairBackwardKeepsTheOverwriteContract) {
  using T = TypeParam;
  Gpu gpu;
  const AttentionBlock b{1, 16, 16, 2, 1, 16, 0, 32, true};
  const Shapes s(b);
  const auto dq0 = random_normal<T>(static_cast<std::size_t>(s.q.numel()), 3);
  const auto dk0 = random_normal<T>(static_cast<std::size_t>(s.kv.numel()), 4);
  auto dq = gpu.upload(dq0, s.q), dk = gpu.upload(dk0, s.kv), dv = gpu.upload(dk0, s.kv);
  auto x = gpu.upload(dq0, s.q), kv = gpu.upload(dk0, s.kv), r = gpu.empty(s.rows, DType::f32);
  auto ws = gpu.empty({static_cast<std::int64_t>(
                          kernels::attention_block_bwd_workspace_bytes(b, dtype_of_v<T>, gpu.device()))},
                      DType::u8);
  kernels::attention_block_bwd(dq.view, dk.view, dv.view, x.view, x.view, kv.view, kv.view, r.view, r.view, b,
                               {.dq = true, .dkv = false}, bytes(ws), gpu.stream());
  EXPECT_EQ(gpu.download<T>(dq.view), dq0);
  EXPECT_EQ(gpu.download<T>(dk.view), std::vector<T>(dk0.size(), from_double<T>(0.0)));
  EXPECT_EQ(gpu.download<T>(dv.view), std::vector<T>(dk0.size(), from_double<T>(0.0)));
}

/// Rows [t0, t0 + len) of every sequence of a [B, T, width] host tensor, and the way back.
template <typename T>
std::vector<T> rows_of(const std::vector<T>& x, std::int64_t B, std::int64_t T_, std::int64_t width, std::int64_t t0,
                       std::int64_t len) {
  std::vector<T> out;
  for (std::int64_t b = 0; b < B; ++b)
    out.insert(out.end(), x.begin() + (b * T_ + t0) * width, x.begin() + (b * T_ + t0 + len) * width);
  return out;
}
template <typename T>
void put_rows(std::vector<T>& x, const std::vector<T>& part, std::int64_t B, std::int64_t T_, std::int64_t width,
              std::int64_t t0, std::int64_t len) {
  for (std::int64_t b = 0; b < B; ++b)
    std::copy(part.begin() + b * len * width, part.begin() + (b + 1) * len * width, x.begin() + (b * T_ + t0) * width);
}

// A 100-token sequence cut into blocks of 40, 40 and 20, every query block folding the key blocks in ring order
// (its own first, then the earlier ones, then the later, fully masked ones), finished, then the blocked backward
// over the visible pairs: out, lse, dq, dk and dv equal the unfused CUDA attention's on the whole sequence.
TYPED_TEST(CudaAttentionBlocks, WholeRingOfBlocksEqualsTheUnfusedCudaAttention) {
  using T = TypeParam;
  Gpu gpu;
  const AttentionDims d{2, 100, 4, 2, 16};
  const std::vector<std::pair<std::int64_t, std::int64_t>> blocks = {{0, 40}, {40, 40}, {80, 20}};
  const std::int64_t qw = d.heads * d.head_dim, kw = d.kv_heads * d.head_dim;
  const Shape qs{d.batch, d.seq, d.heads, d.head_dim}, ks{d.batch, d.seq, d.kv_heads, d.head_dim};
  const Shape ls{d.batch, d.heads, d.seq};
  const auto q = random_normal<T>(static_cast<std::size_t>(qs.numel()), 301);
  const auto k = random_normal<T>(static_cast<std::size_t>(ks.numel()), 302);
  const auto v = random_normal<T>(static_cast<std::size_t>(ks.numel()), 303);
  const auto dout = random_normal<T>(static_cast<std::size_t>(qs.numel()), 304);
  const StreamRef gs = gpu.stream();

  // The reference: the unfused twin over the whole sequence.
  auto gq = gpu.upload(q, qs), gk = gpu.upload(k, ks), gv = gpu.upload(v, ks), gdo = gpu.upload(dout, qs);
  auto go = gpu.empty(qs, dtype_of_v<T>), gl = gpu.empty(ls, DType::f32);
  auto gdq = gpu.empty(qs, dtype_of_v<T>), gdk = gpu.empty(ks, dtype_of_v<T>), gdv = gpu.empty(ks, dtype_of_v<T>);
  const auto unfused = kernels::AttentionImpl::unfused;
  auto wf = gpu.empty({static_cast<std::int64_t>(
                          kernels::attention_fwd_workspace_bytes(d, dtype_of_v<T>, gpu.device(), unfused))},
                      DType::u8);
  auto wb = gpu.empty({static_cast<std::int64_t>(
                          kernels::attention_bwd_workspace_bytes(d, dtype_of_v<T>, gpu.device(), unfused))},
                      DType::u8);
  kernels::attention_fwd(go.view, gl.view, gq.view, gk.view, gv.view, d, bytes(wf), gs, unfused);
  kernels::attention_bwd(gdq.view, gdk.view, gdv.view, gdo.view, gq.view, gk.view, gv.view, go.view, gl.view, d,
                         bytes(wb), gs, unfused);

  // Blocks: device copies of each block's rows, states per query block.
  struct Block {
    DeviceTensor q, k, v, dout, out, lse, acc, m, l, delta, dq, dk, dv;
  };
  std::vector<Block> blk;
  for (const auto& [t0, len] : blocks) {
    const Shape bq{d.batch, len, d.heads, d.head_dim}, bk{d.batch, len, d.kv_heads, d.head_dim};
    const Shape br{d.batch, d.heads, len};
    blk.push_back({gpu.upload(rows_of(q, d.batch, d.seq, qw, t0, len), bq),
                   gpu.upload(rows_of(k, d.batch, d.seq, kw, t0, len), bk),
                   gpu.upload(rows_of(v, d.batch, d.seq, kw, t0, len), bk),
                   gpu.upload(rows_of(dout, d.batch, d.seq, qw, t0, len), bq), gpu.empty(bq, dtype_of_v<T>),
                   gpu.empty(br, DType::f32), gpu.empty(bq, DType::f32), gpu.empty(br, DType::f32),
                   gpu.empty(br, DType::f32), gpu.empty(br, DType::f32), gpu.empty(bq, dtype_of_v<T>),
                   gpu.empty(bk, dtype_of_v<T>), gpu.empty(bk, dtype_of_v<T>)});
  }
  const auto pair = [&](std::size_t qi, std::size_t ki) {
    return AttentionBlock{d.batch, blocks[qi].second, blocks[ki].second, d.heads, d.kv_heads, d.head_dim,
                          blocks[qi].first, blocks[ki].first, true};
  };
  std::size_t fwd_bytes = 0, bwd_bytes = 0;
  for (std::size_t qi = 0; qi < blocks.size(); ++qi)
    for (std::size_t ki = 0; ki < blocks.size(); ++ki) {
      fwd_bytes = std::max(fwd_bytes, kernels::attention_block_fwd_workspace_bytes(pair(qi, ki), dtype_of_v<T>, gpu.device()));
      bwd_bytes = std::max(bwd_bytes, kernels::attention_block_bwd_workspace_bytes(pair(qi, ki), dtype_of_v<T>, gpu.device()));
    }
  auto ws = gpu.empty({static_cast<std::int64_t>(std::max(fwd_bytes, bwd_bytes))}, DType::u8);
  const std::size_t n = blocks.size();
  for (std::size_t qi = 0; qi < n; ++qi) {
    Block& Qb = blk[qi];
    const AttentionDims qd = pair(qi, qi).q_dims();
    kernels::attention_block_state_init(Qb.acc.view, Qb.m.view, Qb.l.view, qd, gs);
    for (std::size_t step = 0; step < n; ++step) {
      const std::size_t ki = (qi + n - step) % n;  // ring order: own block, then the earlier ones, then the later
      kernels::attention_block_fwd(Qb.acc.view, Qb.m.view, Qb.l.view, Qb.q.view, blk[ki].k.view, blk[ki].v.view,
                                   pair(qi, ki), bytes(ws), gs);
    }
    kernels::attention_block_finish(Qb.out.view, Qb.lse.view, Qb.acc.view, Qb.m.view, Qb.l.view, qd, gs);
    kernels::attention_row_delta(Qb.delta.view, Qb.dout.view, Qb.out.view, qd, gs);
  }
  std::vector<char> dq_started(n, 0), dkv_started(n, 0);
  for (std::size_t qi = 0; qi < n; ++qi)
    for (std::size_t ki = 0; ki <= qi; ++ki) {  // the visible pairs
      Block &Q = blk[qi], &K = blk[ki];
      kernels::attention_block_bwd(Q.dq.view, K.dk.view, K.dv.view, Q.dout.view, Q.q.view, K.k.view, K.v.view,
                                   Q.lse.view, Q.delta.view, pair(qi, ki),
                                   {.dq = dq_started[qi] != 0, .dkv = dkv_started[ki] != 0}, bytes(ws), gs);
      dq_started[qi] = dkv_started[ki] = 1;
    }

  // Assemble on the host and compare with the whole-sequence kernels.
  std::vector<T> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(static_cast<std::size_t>(ls.numel()));
  for (std::size_t i = 0; i < n; ++i) {
    const auto [t0, len] = blocks[i];
    put_rows(out, gpu.download<T>(blk[i].out.view), d.batch, d.seq, qw, t0, len);
    put_rows(dq, gpu.download<T>(blk[i].dq.view), d.batch, d.seq, qw, t0, len);
    put_rows(dk, gpu.download<T>(blk[i].dk.view), d.batch, d.seq, kw, t0, len);
    put_rows(dv, gpu.download<T>(blk[i].dv.view), d.batch, d.seq, kw, t0, len);
    // lse [B, H, len] of the block: rows t0 .. t0 + len of each (b, h) of [B, H, T].
    put_rows(lse, gpu.download<float>(blk[i].lse.view), d.batch * d.heads, d.seq, 1, t0, len);
  }
  EXPECT_TRUE(rel_l2_close(out, gpu.download<T>(go.view), tol<T>())) << "out";
  EXPECT_TRUE(all_close(lse, gpu.download<float>(gl.view), 1e-5, 1e-5)) << "lse";
  EXPECT_TRUE(rel_l2_close(dq, gpu.download<T>(gdq.view), tol<T>())) << "dq";
  EXPECT_TRUE(rel_l2_close(dk, gpu.download<T>(gdk.view), tol<T>())) << "dk";
  EXPECT_TRUE(rel_l2_close(dv, gpu.download<T>(gdv.view), tol<T>())) << "dv";
}

TEST(CudaAttentionBlocksArguments, WorkspaceSizedForTheCpuIsRefusedOnTheGpu) {
  Gpu gpu;
  const AttentionBlock b{1, 64, 64, 4, 2, 16, 64, 0, true};
  const Shapes s(b);
  const std::size_t cpu_fwd = kernels::attention_block_fwd_workspace_bytes(b, DType::f32);
  ASSERT_LT(cpu_fwd, kernels::attention_block_fwd_workspace_bytes(b, DType::f32, gpu.device()));
  ASSERT_LT(kernels::attention_block_bwd_workspace_bytes(b, DType::f32),
            kernels::attention_block_bwd_workspace_bytes(b, DType::f32, gpu.device()));
  auto acc = gpu.empty(s.q, DType::f32), r = gpu.empty(s.rows, DType::f32), kv = gpu.empty(s.kv, DType::f32);
  auto ws = gpu.empty({static_cast<std::int64_t>(cpu_fwd)}, DType::u8);
  EXPECT_TRUE(throws_with<PreconditionError>(
      [&] {
        kernels::attention_block_fwd(acc.view, r.view, r.view, acc.view, kv.view, kv.view, b, bytes(ws), gpu.stream());
      },
      {"attention_block_fwd", "workspace"}));
}

}  // namespace
}  // namespace hzp::test
