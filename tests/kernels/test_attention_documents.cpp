// Tests of document masking in attention (`first`, data.packing = documents): the scalar reference against a
// direct dense masked softmax written here; the tiled launchers (forward, backward; fp64, fp32, bf16) against the
// reference with the same masks, over layouts with documents shorter than a tile and boundaries on tile edges;
// gradients against central differences; first all zero bitwise equal to the unmasked call; key tiles before a
// query tile's documents never read (NaN there cannot reach its rows); the blocked kernels of ring attention,
// a sequence cut into chunks reproducing the whole masked sequence; and the refusals of bad masks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/attention_blocks_ref.hpp"
#include "attention/attention_ref.hpp"
#include "hzp/core/device.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "dense_attention.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::convert;
using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

using test::kv_elems;
using test::kv_shape;
using test::lse_shape;
using test::q_elems;
using test::q_shape;

/// [B, T] first positions from each sequence's document starts (written here, independent of the workload's).
std::vector<std::int32_t> first_of(const std::vector<std::vector<std::int32_t>>& starts, std::int64_t T) {
  std::vector<std::int32_t> f;
  for (const auto& s : starts)
    for (std::int64_t t = 0; t < T; ++t) {
      std::int32_t v = 0;
      for (std::int32_t x : s)
        if (x <= t) v = x;
      f.push_back(v);
    }
  return f;
}

// T = 200 over 64-row tiles: documents of 5 and 1 tokens, boundaries at 64 and 128 (tile edges), one that crosses
// a tile; the second sequence a single document in its first 10 tokens' worth of one-token documents, then long.
const std::vector<std::vector<std::int32_t>> kLayouts = {{0, 5, 40, 64, 128, 129, 190},
                                                         {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100}};
const AttentionDims kDims{2, 200, 4, 2, 16};

template <typename T>
struct Inputs {
  std::vector<T> q, k, v, dout;
};
template <typename T>
Inputs<T> make_inputs(const AttentionDims& d, std::uint64_t seed) {
  return {test::random_uniform<T>(q_elems(d), seed, -2.0, 2.0), test::random_uniform<T>(kv_elems(d), seed + 1, -2.0, 2.0),
          test::random_uniform<T>(kv_elems(d), seed + 2), test::random_uniform<T>(q_elems(d), seed + 3)};
}

template <typename T>
struct Result {
  std::vector<T> out;
  std::vector<acc_t<T>> lse;
  std::vector<T> dq, dk, dv;
};

/// The launchers (the tiled CPU kernel): forward, then backward from that forward.
template <typename T>
Result<T> run_tiled(const Inputs<T>& in, const AttentionDims& d, std::span<const std::int32_t> first) {
  Result<T> r{std::vector<T>(q_elems(d)), std::vector<acc_t<T>>(static_cast<std::size_t>(d.batch * d.heads * d.seq)),
              std::vector<T>(q_elems(d)), std::vector<T>(kv_elems(d)), std::vector<T>(kv_elems(d))};
  std::vector<std::byte> ws(std::max(attention_fwd_workspace_bytes(d, dtype_of_v<T>),
                                     attention_bwd_workspace_bytes(d, dtype_of_v<T>)));
  attention_fwd(view(r.out, q_shape(d)), view(r.lse, lse_shape(d)), cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)),
                cview(in.v, kv_shape(d)), d, ws, kHost, AttentionImpl::automatic, first);
  attention_bwd(view(r.dq, q_shape(d)), view(r.dk, kv_shape(d)), view(r.dv, kv_shape(d)), cview(in.dout, q_shape(d)),
                cview(in.q, q_shape(d)), cview(in.k, kv_shape(d)), cview(in.v, kv_shape(d)), cview(r.out, q_shape(d)),
                cview(r.lse, lse_shape(d)), d, ws, kHost, AttentionImpl::automatic, first);
  return r;
}

/// The scalar reference with the same mask.
template <typename T>
Result<T> run_ref(const Inputs<T>& in, const AttentionDims& d, const std::int32_t* first) {
  Result<T> r{std::vector<T>(q_elems(d)), std::vector<acc_t<T>>(static_cast<std::size_t>(d.batch * d.heads * d.seq)),
              std::vector<T>(q_elems(d)), std::vector<T>(kv_elems(d)), std::vector<T>(kv_elems(d))};
  std::vector<acc_t<T>> work(static_cast<std::size_t>(
      std::max(attention_fwd_workspace_elems(d), attention_bwd_workspace_elems(d))));
  attention_fwd_ref<T>(r.out.data(), r.lse.data(), in.q.data(), in.k.data(), in.v.data(), d, work.data(), first);
  attention_bwd_ref<T>(r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), in.q.data(), in.k.data(), in.v.data(),
                       r.out.data(), r.lse.data(), d, work.data(), first);
  return r;
}

template <typename T>
::testing::AssertionResult close(const char* what, const std::vector<T>& got, const std::vector<T>& want, double t) {
  ::testing::AssertionResult r =
      std::is_same_v<T, bf16> ? test::rel_l2_close(got, want, t) : test::all_close(got, want, t, t);
  if (!r) r << " (" << what << ")";
  return r;
}

TEST(AttentionDocuments, ReferenceMatchesADirectDenseMaskedSoftmax) {
  const std::vector<std::int32_t> first = first_of(kLayouts, kDims.seq);
  const Inputs<double> in = make_inputs<double>(kDims, 5);
  const Result<double> ref = run_ref(in, kDims, first.data());
  const test::DenseAttention want = test::dense_attention(in.q, in.k, in.v, kDims, first);
  EXPECT_TRUE(test::all_close(ref.out, want.out, 1e-12, 1e-13));
  EXPECT_TRUE(test::all_close(ref.lse, want.lse, 1e-12, 1e-13));
  // The mask matters: plain causal attention differs.
  const Result<double> causal = run_ref(in, kDims, nullptr);
  EXPECT_FALSE(test::all_close(causal.out, want.out, 1e-6, 1e-6));
}

template <typename T>
void expect_tiled_matches_reference(double out_tol, double grad_tol) {
  const std::vector<std::int32_t> first = first_of(kLayouts, kDims.seq);
  const Inputs<T> in = make_inputs<T>(kDims, 9);
  const Result<T> got = run_tiled(in, kDims, first);
  const Result<T> want = run_ref(in, kDims, first.data());
  EXPECT_TRUE(close("out", got.out, want.out, out_tol));
  EXPECT_TRUE(test::all_close(got.lse, want.lse, out_tol, out_tol)) << "lse";
  EXPECT_TRUE(close("dq", got.dq, want.dq, grad_tol));
  EXPECT_TRUE(close("dk", got.dk, want.dk, grad_tol));
  EXPECT_TRUE(close("dv", got.dv, want.dv, grad_tol));
}

TEST(AttentionDocuments, TiledMatchesReferenceInDouble) { expect_tiled_matches_reference<double>(1e-12, 1e-11); }
TEST(AttentionDocuments, TiledMatchesReferenceInFp32) { expect_tiled_matches_reference<float>(2e-5, 1e-4); }
TEST(AttentionDocuments, TiledMatchesReferenceInBf16) { expect_tiled_matches_reference<bf16>(1e-2, 1e-2); }

TEST(AttentionDocuments, BackwardMatchesFiniteDifferencesInDouble) {
  const AttentionDims d{1, 70, 2, 1, 4};  // two tiles; a boundary on the tile edge and one inside each tile
  const std::vector<std::int32_t> first = first_of({{0, 3, 30, 64, 66}}, d.seq);
  Inputs<double> in = make_inputs<double>(d, 13);
  const Result<double> g = run_tiled(in, d, first);
  const auto loss = [&] { return test::dot(in.dout, run_tiled(in, d, first).out); };
  test::FdOptions opt;
  opt.max_samples = 150;
  opt.min_scale = 1e-9;  // a one-token document's dq and dk are zero up to rounding
  EXPECT_TRUE(test::check_gradient("dq", in.q, g.dq, loss, opt));
  EXPECT_TRUE(test::check_gradient("dk", in.k, g.dk, loss, opt));
  EXPECT_TRUE(test::check_gradient("dv", in.v, g.dv, loss, opt));
}

template <typename T>
void expect_zero_first_is_bitwise_unmasked() {
  const std::vector<std::int32_t> zeros(static_cast<std::size_t>(kDims.batch * kDims.seq), 0);
  const Inputs<T> in = make_inputs<T>(kDims, 17);
  const Result<T> masked = run_tiled(in, kDims, zeros);
  const Result<T> plain = run_tiled(in, kDims, {});
  const auto same = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  EXPECT_TRUE(same(masked.out, plain.out));
  EXPECT_TRUE(same(masked.lse, plain.lse));
  EXPECT_TRUE(same(masked.dq, plain.dq));
  EXPECT_TRUE(same(masked.dk, plain.dk));
  EXPECT_TRUE(same(masked.dv, plain.dv));
}

TEST(AttentionDocuments, FirstAllZeroIsBitwiseTheUnmaskedCall) {
  expect_zero_first_is_bitwise_unmasked<double>();
  expect_zero_first_is_bitwise_unmasked<float>();
  expect_zero_first_is_bitwise_unmasked<bf16>();
}

// Documents [0, 130) and [130, 200): query tiles from 192 on start their documents at 130, so key tiles 0 and 1
// (positions 0..127) are never visited for them, and rows 130.. of the tile at 128 are left out of key tile 1's
// GEMMs. NaN keys and values at 0..127 therefore cannot reach any row of the second document, forward or back.
TEST(AttentionDocuments, KeyTilesBeforeAQueryTilesDocumentsAreNeverRead) {
  const AttentionDims d{1, 200, 2, 1, 8};
  const std::int64_t boundary = 130;
  const std::vector<std::int32_t> first = first_of({{0, static_cast<std::int32_t>(boundary)}}, d.seq);
  Inputs<float> in = make_inputs<float>(d, 23);
  const Result<float> clean = run_ref(in, d, first.data());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t j = 0; j < 128; ++j)
    for (std::int64_t e = 0; e < d.kv_heads * d.head_dim; ++e) {
      in.k[static_cast<std::size_t>(j * d.kv_heads * d.head_dim + e)] = nan;
      in.v[static_cast<std::size_t>(j * d.kv_heads * d.head_dim + e)] = nan;
    }
  const Result<float> got = run_tiled(in, d, first);
  const auto tail = [&](const std::vector<float>& x, std::int64_t width) {
    return std::vector<float>(x.begin() + boundary * width, x.end());
  };
  const std::int64_t qw = d.heads * d.head_dim, kw = d.kv_heads * d.head_dim;
  EXPECT_TRUE(test::all_close(tail(got.out, qw), tail(clean.out, qw), 2e-5, 2e-5)) << "out of the second document";
  EXPECT_TRUE(test::all_close(tail(got.dq, qw), tail(clean.dq, qw), 1e-4, 1e-4)) << "dq of the second document";
  EXPECT_TRUE(test::all_close(tail(got.dk, kw), tail(clean.dk, kw), 1e-4, 1e-4)) << "dk of the second document";
  EXPECT_TRUE(test::all_close(tail(got.dv, kw), tail(clean.dv, kw), 1e-4, 1e-4)) << "dv of the second document";
}

// ------------------------------------------------------------------------------------------------
// Blocked kernels (ring attention): a sequence cut into chunks, every causally visible pair folded with the query
// chunk's slice of `first` (global positions), reproduces whole-sequence masked attention; and each pair through
// the tiles equals the blocked reference.

template <typename T>
void expect_chunks_reproduce_the_sequence(std::int64_t chunk, double out_tol, double grad_tol) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype_of_v<T>) << " chunk=" << chunk);
  using A = acc_t<T>;
  const AttentionDims d{1, 4 * chunk, 2, 1, 8};
  const std::int64_t n = 4, H = d.heads, KV = d.kv_heads, D = d.head_dim, C = chunk;
  const std::vector<std::int32_t> first =
      first_of({{0, 3, static_cast<std::int32_t>(C), static_cast<std::int32_t>(C + 7),
                 static_cast<std::int32_t>(3 * C - 2)}},
               d.seq);
  const Inputs<T> in = make_inputs<T>(d, 29 + static_cast<std::uint64_t>(chunk));
  const Result<T> want = run_ref(in, d, first.data());
  const AttentionDims cd{1, C, H, KV, D};
  std::vector<T> out(q_elems(d)), dq(q_elems(d)), dk(kv_elems(d)), dv(kv_elems(d));
  std::vector<A> lse(static_cast<std::size_t>(H * d.seq));
  std::vector<A> acc(static_cast<std::size_t>(C * H * D)), mx(static_cast<std::size_t>(H * C)),
      sm(static_cast<std::size_t>(H * C)), part(static_cast<std::size_t>(H * C)), delta(part.size());
  const auto rows = [&](const std::vector<T>& x, std::int64_t c, std::int64_t w) {
    return ConstTensorView(x.data() + c * C * w, Shape{1, C, w / D, D}, dtype_of_v<T>);
  };
  const auto mrows = [&](std::vector<T>& x, std::int64_t c, std::int64_t w) {
    return TensorView(x.data() + c * C * w, Shape{1, C, w / D, D}, dtype_of_v<T>);
  };
  const auto pair = [&](std::int64_t qc, std::int64_t kc) {
    return AttentionBlock{1, C, C, H, KV, D, qc * C, kc * C, true};
  };
  std::vector<std::byte> fws(attention_block_fwd_workspace_bytes(pair(0, 0), dtype_of_v<T>)),
      bws(attention_block_bwd_workspace_bytes(pair(0, 0), dtype_of_v<T>));
  const Shape st{1, H, C};
  // lse of every chunk first (the backward needs the whole sequence's), in [1, H, C] parts kept per chunk.
  std::vector<std::vector<A>> lse_c(n), delta_c(n);
  for (std::int64_t qc = 0; qc < n; ++qc) {
    const std::span<const std::int32_t> f(first.data() + qc * C, static_cast<std::size_t>(C));
    attention_block_state_init(view(acc, Shape{1, C, H, D}), view(mx, st), view(sm, st), cd, kHost);
    for (std::int64_t kc = qc; kc >= 0; --kc)  // any order: the online softmax does not care
      attention_block_fwd(view(acc, Shape{1, C, H, D}), view(mx, st), view(sm, st), rows(in.q, qc, H * D),
                          rows(in.k, kc, KV * D), rows(in.v, kc, KV * D), pair(qc, kc), fws, kHost, f);
    attention_block_finish(mrows(out, qc, H * D), view(part, st), cview(acc, Shape{1, C, H, D}), cview(mx, st),
                           cview(sm, st), cd, kHost);
    lse_c[static_cast<std::size_t>(qc)] = part;
    for (std::int64_t h = 0; h < H; ++h)
      std::copy(part.begin() + h * C, part.begin() + (h + 1) * C, lse.begin() + h * d.seq + qc * C);
  }
  EXPECT_TRUE(close("out", out, want.out, out_tol));
  EXPECT_TRUE(test::all_close(lse, want.lse, out_tol, out_tol)) << "lse";
  for (std::int64_t qc = 0; qc < n; ++qc) {
    attention_row_delta(view(part, st), rows(in.dout, qc, H * D), rows(out, qc, H * D), cd, kHost);
    delta_c[static_cast<std::size_t>(qc)] = part;
  }
  std::vector<char> kv_started(static_cast<std::size_t>(n), 0);
  for (std::int64_t qc = 0; qc < n; ++qc) {
    const std::span<const std::int32_t> f(first.data() + qc * C, static_cast<std::size_t>(C));
    for (std::int64_t kc = 0; kc <= qc; ++kc) {
      attention_block_bwd(mrows(dq, qc, H * D), mrows(dk, kc, KV * D), mrows(dv, kc, KV * D), rows(in.dout, qc, H * D),
                          rows(in.q, qc, H * D), rows(in.k, kc, KV * D), rows(in.v, kc, KV * D),
                          cview(lse_c[static_cast<std::size_t>(qc)], st), cview(delta_c[static_cast<std::size_t>(qc)], st),
                          pair(qc, kc), {.dq = kc > 0, .dkv = kv_started[static_cast<std::size_t>(kc)] != 0}, bws, kHost,
                          f);
      kv_started[static_cast<std::size_t>(kc)] = 1;
    }
  }
  EXPECT_TRUE(close("dq", dq, want.dq, grad_tol));
  EXPECT_TRUE(close("dk", dk, want.dk, grad_tol));
  EXPECT_TRUE(close("dv", dv, want.dv, grad_tol));
}

TEST(AttentionDocuments, ChunkedSequenceReproducesTheMaskedSequence) {
  for (std::int64_t chunk : {50, 64, 70}) {  // inside a tile, exactly one, one and a bit
    expect_chunks_reproduce_the_sequence<double>(chunk, 1e-12, 1e-11);
    expect_chunks_reproduce_the_sequence<float>(chunk, 2e-5, 1e-4);
    expect_chunks_reproduce_the_sequence<bf16>(chunk, 1e-2, 1e-2);
  }
}

TEST(AttentionDocuments, TiledBlockPairMatchesTheBlockedReference) {
  using T = double;
  // Query rows at 100..179 against keys at 40..139: partly causal, and the documents start at 60 and 150.
  const AttentionBlock blk{1, 80, 100, 2, 1, 8, 100, 40, true};
  std::vector<std::int32_t> first(80);
  for (std::int64_t i = 0; i < 80; ++i) first[static_cast<std::size_t>(i)] = 100 + i < 150 ? 60 : 150;
  const std::size_t nq = 80 * 2 * 8, nk = 100 * 8;
  const auto q = test::random_uniform<T>(nq, 41, -2, 2), k = test::random_uniform<T>(nk, 42, -2, 2),
             v = test::random_uniform<T>(nk, 43), dout = test::random_uniform<T>(nq, 44);
  // A non-empty starting state and gradients, so the fold and the accumulation both count.
  auto acc = test::random_uniform<T>(nq, 45), acc_ref = acc;
  std::vector<T> mx(160, 0.5), sm(160, 2.0), mx_ref = mx, sm_ref = sm;
  const Shape qs{1, 80, 2, 8}, ks{1, 100, 1, 8}, st{1, 2, 80};
  std::vector<std::byte> fws(attention_block_fwd_workspace_bytes(blk, DType::f64)),
      bws(attention_block_bwd_workspace_bytes(blk, DType::f64));
  attention_block_fwd(view(acc, qs), view(mx, st), view(sm, st), cview(q, qs), cview(k, ks), cview(v, ks), blk, fws,
                      kHost, first);
  attention_block_fwd_ref<T>(acc_ref.data(), mx_ref.data(), sm_ref.data(), q.data(), k.data(), v.data(), blk,
                             first.data());
  EXPECT_TRUE(test::all_close(acc, acc_ref, 1e-12, 1e-12)) << "acc";
  EXPECT_TRUE(test::all_close(mx, mx_ref, 1e-12, 1e-12)) << "row_max";
  EXPECT_TRUE(test::all_close(sm, sm_ref, 1e-12, 1e-12)) << "row_sum";
  const auto lse = test::random_uniform<T>(160, 46, 1, 2), delta = test::random_uniform<T>(160, 47);
  auto dq = test::random_uniform<T>(nq, 48), dk = test::random_uniform<T>(nk, 49), dv = test::random_uniform<T>(nk, 50);
  auto dq_ref = dq, dk_ref = dk, dv_ref = dv;
  std::vector<T> work(static_cast<std::size_t>(attention_block_bwd_workspace_elems(blk)));
  attention_block_bwd(view(dq, qs), view(dk, ks), view(dv, ks), cview(dout, qs), cview(q, qs), cview(k, ks),
                      cview(v, ks), cview(lse, st), cview(delta, st), blk, {.dq = true, .dkv = true}, bws, kHost, first);
  attention_block_bwd_ref<T>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), q.data(), k.data(), v.data(),
                             lse.data(), delta.data(), blk, {.dq = true, .dkv = true}, work.data(), first.data());
  EXPECT_TRUE(test::all_close(dq, dq_ref, 1e-11, 1e-11)) << "dq";
  EXPECT_TRUE(test::all_close(dk, dk_ref, 1e-11, 1e-11)) << "dk";
  EXPECT_TRUE(test::all_close(dv, dv_ref, 1e-11, 1e-11)) << "dv";
}

TEST(AttentionDocuments, AKvBlockBeforeEveryQuerysDocumentLeavesTheStateBitwiseUnchanged) {
  const AttentionBlock blk{1, 16, 16, 1, 1, 4, 32, 0, true};  // keys 0..15, queries 32..47 in a document from 20
  const std::vector<std::int32_t> first(16, 20);
  const auto q = test::random_uniform<float>(64, 1), k = test::random_uniform<float>(64, 2),
             v = test::random_uniform<float>(64, 3);
  auto acc = test::random_uniform<float>(64, 4);
  std::vector<float> mx(16, 0.25f), sm(16, 3.0f);
  const auto acc0 = acc;
  std::vector<std::byte> ws(attention_block_fwd_workspace_bytes(blk, DType::f32));
  attention_block_fwd(view(acc, Shape{1, 16, 1, 4}), view(mx, Shape{1, 1, 16}), view(sm, Shape{1, 1, 16}),
                      cview(q, Shape{1, 16, 1, 4}), cview(k, Shape{1, 16, 1, 4}), cview(v, Shape{1, 16, 1, 4}), blk, ws,
                      kHost, first);
  EXPECT_EQ(std::memcmp(acc.data(), acc0.data(), acc.size() * sizeof(float)), 0);
  EXPECT_EQ(mx, std::vector<float>(16, 0.25f));
  EXPECT_EQ(sm, std::vector<float>(16, 3.0f));
}

TEST(AttentionDocuments, BadMasksAndTheFusedKernelAreRefused) {
  const AttentionDims d{1, 4, 1, 1, 2};
  const Inputs<float> in = make_inputs<float>(d, 3);
  const auto run = [&](std::vector<std::int32_t> first) { (void)run_tiled(in, d, first); };
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { run({0, 0, 0}); }, {"attention_fwd", "first holds 3", "4"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { run({0, 0, 3, 3}); }, {"first[0, 2] = 3", "[0, 2]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { run({0, 1, 0, 1}); }, {"first[0, 2] = 0", "[1, 2]"}));
  const Device gpu = Device::cuda(0);
  std::vector<float> buf(64);
  const TensorView a(buf.data(), Shape{1, 4, 1, 2}, DType::f32, gpu), r(buf.data(), Shape{1, 1, 4}, DType::f32, gpu);
  const std::vector<std::int32_t> first{0, 0, 2, 2};
  std::vector<std::byte> ws(1 << 16);
  const StreamRef stream = StreamRef::wrap(gpu, nullptr);
  // On a GPU the mask is device memory: its values are not read on the host, its size is still checked; cuDNN's
  // fused kernel has no document mask, so asking for it by name is refused (before anything touches the device).
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { attention_fwd(a, r, a, a, a, d, ws, stream, AttentionImpl::unfused, {first.data(), 3}); },
      {"attention_fwd", "first holds 3", "4"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { attention_fwd(a, r, a, a, a, d, ws, stream, AttentionImpl::fused, first); },
      {"model.attention = fused", "no document mask", "Fix: model.attention = auto or unfused"}));
  EXPECT_EQ(resolve_attention_impl(AttentionImpl::automatic, d, DType::bf16, gpu, true), AttentionImpl::unfused);
}

}  // namespace
}  // namespace hzp::kernels
