// Tests of the tiled CPU path of attention (kernels/attention/attention_tiled.hpp), reached through the
// launchers, against the scalar references beside it (attention_ref.hpp, attention_blocks_ref.hpp) in
// fp64, fp32 and bf16: whole sequences whose length is not a multiple of the 64-row tile, block pairs whose
// causal boundary cuts through tiles (partly, fully and not masked, causal and not), accumulation into
// existing gradients, and the determinism the tiles promise (bitwise twice, and independent of the batch).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "attention/attention_blocks_ref.hpp"
#include "attention/attention_ref.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

Shape rows_shape(std::int64_t b, std::int64_t t, std::int64_t n, std::int64_t d) { return {b, t, n, d}; }
Shape stats_shape(std::int64_t b, std::int64_t h, std::int64_t t) { return {b, h, t}; }
std::size_t count(const Shape& s) { return static_cast<std::size_t>(s.numel()); }

/// Per precision: forward outputs and lse, then gradients. bf16 stores round to 8 bits, so its gradients
/// are compared by the relative L2 norm; fp64 and fp32 element-wise.
template <typename T>
struct Tol {
  double out, grad;
};
template <typename T>
constexpr Tol<T> tol() {
  if constexpr (std::is_same_v<T, double>)
    return {1e-12, 1e-11};
  else if constexpr (std::is_same_v<T, float>)
    return {2e-5, 1e-4};
  else
    return {1e-2, 1e-2};
}

template <typename T>
::testing::AssertionResult close(const std::string& what, const std::vector<T>& got, const std::vector<T>& want,
                                 double t) {
  ::testing::AssertionResult r = std::is_same_v<T, bf16> ? test::rel_l2_close(got, want, t)
                                                         : test::all_close(got, want, t, t);
  if (!r) r << " (" << what << ")";
  return r;
}

template <typename T>
struct Problem {
  std::vector<T> q, k, v, dout;
};

template <typename T>
Problem<T> make_problem(std::size_t nq, std::size_t nk, std::uint64_t seed) {
  // Scores of order 1 with spread: a softmax that is neither flat nor one-hot, so P and dS matter.
  return {test::random_uniform<T>(nq, seed, -2.0, 2.0), test::random_uniform<T>(nk, seed + 1, -2.0, 2.0),
          test::random_uniform<T>(nk, seed + 2), test::random_uniform<T>(nq, seed + 3)};
}

// ------------------------------------------------------------------------------------------------
// Whole sequences: attention_fwd / attention_bwd against attention_fwd_ref / attention_bwd_ref.

template <typename T>
void expect_whole_matches_reference(const AttentionDims& d) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype_of_v<T>) << " B=" << d.batch << " T=" << d.seq
                                    << " H=" << d.heads << " KV=" << d.kv_heads << " D=" << d.head_dim);
  using A = acc_t<T>;
  const Shape qs = rows_shape(d.batch, d.seq, d.heads, d.head_dim), ks = rows_shape(d.batch, d.seq, d.kv_heads, d.head_dim),
              ss = stats_shape(d.batch, d.heads, d.seq);
  const Problem<T> p = make_problem<T>(count(qs), count(ks), 7 + static_cast<std::uint64_t>(d.seq));

  std::vector<T> out_ref(count(qs)), out(count(qs));
  std::vector<A> lse_ref(count(ss)), lse(count(ss));
  std::vector<A> ref_work(static_cast<std::size_t>(
      std::max(attention_fwd_workspace_elems(d), attention_bwd_workspace_elems(d))));
  attention_fwd_ref<T>(out_ref.data(), lse_ref.data(), p.q.data(), p.k.data(), p.v.data(), d, ref_work.data());
  std::vector<std::byte> ws(std::max(attention_fwd_workspace_bytes(d, dtype_of_v<T>),
                                     attention_bwd_workspace_bytes(d, dtype_of_v<T>)));
  attention_fwd(view(out, qs), view(lse, ss), cview(p.q, qs), cview(p.k, ks), cview(p.v, ks), d, ws, kHost);
  EXPECT_TRUE(close("out", out, out_ref, tol<T>().out));
  EXPECT_TRUE(test::all_close(lse, lse_ref, tol<T>().out, tol<T>().out)) << "lse";

  // Both backwards from the reference forward, so only the backward differs.
  std::vector<T> dq_ref(count(qs)), dk_ref(count(ks)), dv_ref(count(ks)), dq(count(qs)), dk(count(ks)), dv(count(ks));
  attention_bwd_ref<T>(dq_ref.data(), dk_ref.data(), dv_ref.data(), p.dout.data(), p.q.data(), p.k.data(), p.v.data(),
                       out_ref.data(), lse_ref.data(), d, ref_work.data());
  attention_bwd(view(dq, qs), view(dk, ks), view(dv, ks), cview(p.dout, qs), cview(p.q, qs), cview(p.k, ks),
                cview(p.v, ks), cview(out_ref, qs), cview(lse_ref, ss), d, ws, kHost);
  EXPECT_TRUE(close("dq", dq, dq_ref, tol<T>().grad));
  EXPECT_TRUE(close("dk", dk, dk_ref, tol<T>().grad));
  EXPECT_TRUE(close("dv", dv, dv_ref, tol<T>().grad));
}

// T = 150: two full tiles and a partial one; 64 and 65: exactly one tile and one row over; T = 1.
const AttentionDims kWhole[] = {{2, 150, 4, 2, 16}, {1, 64, 2, 2, 8}, {1, 65, 3, 1, 5}, {1, 1, 2, 1, 4}};

TEST(AttentionTiled, WholeSequenceMatchesScalarReferenceInDouble) {
  for (const AttentionDims& d : kWhole) expect_whole_matches_reference<double>(d);
}
TEST(AttentionTiled, WholeSequenceMatchesScalarReferenceInFp32) {
  for (const AttentionDims& d : kWhole) expect_whole_matches_reference<float>(d);
}
TEST(AttentionTiled, WholeSequenceMatchesScalarReferenceInBf16) {
  for (const AttentionDims& d : kWhole) expect_whole_matches_reference<bf16>(d);
}

// ------------------------------------------------------------------------------------------------
// Block pairs: attention_block_fwd / _bwd against attention_block_fwd_ref / _bwd_ref, starting from a
// non-empty state and non-zero gradients so that the fold and the accumulation are both exercised.

template <typename T>
void expect_block_matches_reference(const AttentionBlock& blk, AttentionBlockAccumulate accumulate) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype_of_v<T>) << " q " << blk.q_pos0 << "+" << blk.q_len << " k "
                                    << blk.k_pos0 << "+" << blk.k_len << (blk.causal ? " causal" : " full")
                                    << " accumulate dq=" << accumulate.dq << " dkv=" << accumulate.dkv);
  using A = acc_t<T>;
  const Shape qs = rows_shape(blk.batch, blk.q_len, blk.heads, blk.head_dim),
              ks = rows_shape(blk.batch, blk.k_len, blk.kv_heads, blk.head_dim),
              ss = stats_shape(blk.batch, blk.heads, blk.q_len);
  const Problem<T> p = make_problem<T>(count(qs), count(ks), 31 + static_cast<std::uint64_t>(blk.k_pos0));

  // A state that has already seen other keys: a running max of 0.5, a sum of 2 and a random accumulator.
  std::vector<A> acc0 = test::random_uniform<A>(count(qs), 41), m0(count(ss), A(0.5)), l0(count(ss), A(2));
  std::vector<A> acc_ref = acc0, m_ref = m0, l_ref = l0, acc = acc0, m = m0, l = l0;
  attention_block_fwd_ref<T>(acc_ref.data(), m_ref.data(), l_ref.data(), p.q.data(), p.k.data(), p.v.data(), blk);
  std::vector<std::byte> fws(attention_block_fwd_workspace_bytes(blk, dtype_of_v<T>));
  attention_block_fwd(view(acc, qs), view(m, ss), view(l, ss), cview(p.q, qs), cview(p.k, ks), cview(p.v, ks), blk,
                      fws, kHost);
  EXPECT_TRUE(test::all_close(acc, acc_ref, tol<T>().out, tol<T>().out)) << "acc";
  EXPECT_TRUE(test::all_close(m, m_ref, tol<T>().out, tol<T>().out)) << "row_max";
  EXPECT_TRUE(test::all_close(l, l_ref, tol<T>().out, tol<T>().out)) << "row_sum";

  const std::vector<A> lse = test::random_uniform<A>(count(ss), 51, 1.0, 3.0), delta = test::random_uniform<A>(count(ss), 52);
  const std::vector<T> dq0 = test::random_uniform<T>(count(qs), 53), dk0 = test::random_uniform<T>(count(ks), 54),
                       dv0 = test::random_uniform<T>(count(ks), 55);
  std::vector<T> dq_ref = dq0, dk_ref = dk0, dv_ref = dv0, dq = dq0, dk = dk0, dv = dv0;
  std::vector<A> ref_work(static_cast<std::size_t>(attention_block_bwd_workspace_elems(blk)));
  attention_block_bwd_ref<T>(dq_ref.data(), dk_ref.data(), dv_ref.data(), p.dout.data(), p.q.data(), p.k.data(),
                             p.v.data(), lse.data(), delta.data(), blk, accumulate, ref_work.data());
  std::vector<std::byte> bws(attention_block_bwd_workspace_bytes(blk, dtype_of_v<T>));
  attention_block_bwd(view(dq, qs), view(dk, ks), view(dv, ks), cview(p.dout, qs), cview(p.q, qs), cview(p.k, ks),
                      cview(p.v, ks), cview(lse, ss), cview(delta, ss), blk, accumulate, bws, kHost);
  EXPECT_TRUE(close("dq", dq, dq_ref, tol<T>().grad));
  EXPECT_TRUE(close("dk", dk, dk_ref, tol<T>().grad));
  EXPECT_TRUE(close("dv", dv, dv_ref, tol<T>().grad));
}

/// Pairs whose visibility boundary falls inside tiles, on both sides of the diagonal, and a fully
/// masked one (keys after every query).
std::vector<AttentionBlock> pairs() {
  std::vector<AttentionBlock> b;
  const auto pair = [](std::int64_t q0, std::int64_t ql, std::int64_t k0, std::int64_t kl, bool causal) {
    return AttentionBlock{2, ql, kl, 4, 2, 16, q0, k0, causal};
  };
  b.push_back(pair(100, 130, 37, 163, true));   // diagonal crosses the q tiles at an odd offset
  b.push_back(pair(0, 70, 30, 90, true));       // the first 30 rows see nothing; keys 70.. seen by no row
  b.push_back(pair(200, 65, 0, 129, true));     // every key visible to every row
  b.push_back(pair(0, 40, 50, 20, true));       // fully masked
  b.push_back(pair(0, 70, 30, 90, false));      // not causal: everything visible
  return b;
}

template <typename T>
void expect_blocks_match_reference() {
  for (const AttentionBlock& blk : pairs())
    for (AttentionBlockAccumulate acc : {AttentionBlockAccumulate{true, true}, AttentionBlockAccumulate{false, false},
                                         AttentionBlockAccumulate{true, false}})
      expect_block_matches_reference<T>(blk, acc);
}

TEST(AttentionTiled, BlockPairsMatchScalarReferenceInDouble) { expect_blocks_match_reference<double>(); }
TEST(AttentionTiled, BlockPairsMatchScalarReferenceInFp32) { expect_blocks_match_reference<float>(); }
TEST(AttentionTiled, BlockPairsMatchScalarReferenceInBf16) { expect_blocks_match_reference<bf16>(); }

// ------------------------------------------------------------------------------------------------
// Determinism: the tiles are fixed by positions, so a sequence's results do not depend on what else is
// in the batch, and a second run gives the same bits.

TEST(AttentionTiled, ResultsAreBitwiseIndependentOfTheBatchAndRepeatable) {
  const AttentionDims two{2, 150, 4, 2, 16}, one{1, 150, 4, 2, 16};
  const Shape qs = rows_shape(2, 150, 4, 16), ks = rows_shape(2, 150, 2, 16), ss = stats_shape(2, 4, 150);
  const Problem<float> p = make_problem<float>(count(qs), count(ks), 77);
  std::vector<std::byte> ws(std::max(attention_fwd_workspace_bytes(two, DType::f32),
                                     attention_bwd_workspace_bytes(two, DType::f32)));
  struct Result {
    std::vector<float> out, lse, dq, dk, dv;
  };
  const auto run = [&](const AttentionDims& d, std::size_t seq_index) {
    const Shape q1 = rows_shape(d.batch, d.seq, d.heads, d.head_dim), k1 = rows_shape(d.batch, d.seq, d.kv_heads, d.head_dim),
                s1 = stats_shape(d.batch, d.heads, d.seq);
    const std::size_t qoff = seq_index * count(q1), koff = seq_index * count(k1);
    const auto part = [](const std::vector<float>& v, std::size_t off, std::size_t n) {
      return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(off), v.begin() + static_cast<std::ptrdiff_t>(off + n));
    };
    const std::vector<float> q = part(p.q, qoff, count(q1)), k = part(p.k, koff, count(k1)), v = part(p.v, koff, count(k1)),
                             dout = part(p.dout, qoff, count(q1));
    Result r{std::vector<float>(count(q1)), std::vector<float>(count(s1)), std::vector<float>(count(q1)),
             std::vector<float>(count(k1)), std::vector<float>(count(k1))};
    attention_fwd(view(r.out, q1), view(r.lse, s1), cview(q, q1), cview(k, k1), cview(v, k1), d, ws, kHost);
    attention_bwd(view(r.dq, q1), view(r.dk, k1), view(r.dv, k1), cview(dout, q1), cview(q, q1), cview(k, k1),
                  cview(v, k1), cview(r.out, q1), cview(r.lse, s1), d, ws, kHost);
    return r;
  };
  const Result both = run(two, 0), again = run(two, 0), second = run(one, 1);
  const auto same = [](const std::vector<float>& a, std::size_t off, const std::vector<float>& b) {
    return std::memcmp(a.data() + off, b.data(), b.size() * sizeof(float)) == 0;
  };
  for (auto f : {&Result::out, &Result::lse, &Result::dq, &Result::dk, &Result::dv})
    EXPECT_TRUE(same(both.*f, 0, again.*f)) << "a second run differs";
  // Sequence 1 of the batch of two against the same sequence alone.
  EXPECT_TRUE(same(both.out, count(qs) / 2, second.out));
  EXPECT_TRUE(same(both.lse, count(ss) / 2, second.lse));
  EXPECT_TRUE(same(both.dq, count(qs) / 2, second.dq));
  EXPECT_TRUE(same(both.dk, count(ks) / 2, second.dk));
  EXPECT_TRUE(same(both.dv, count(ks) / 2, second.dv));
}

}  // namespace
}  // namespace hzp::kernels
