// Tests of blocked causal grouped-query attention (kernels/attention/attention_blocks): a whole causal
// sequence cut into chunks (C = 1..4 equal chunks, 5+7+12, and the load-balanced layout of context
// parallelism) and run pair by pair through the online-softmax forward and the blocked backward must
// reproduce the one-block attention_fwd / attention_bwd in fp64, fp32 and bf16, whatever the order of the
// kv blocks; fully and partly masked pairs leave what they cannot see alone; non-causal blocks match a
// direct softmax in double and central differences; bad arguments are refused by name.
// Each comparison is max|actual − expected| / max|expected|; the worst value of each quantity is recorded
// as a test property (run with --gtest_output=xml to see the headroom of every tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::convert;
using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

// ------------------------------------------------------------------------------------------------
// Chunks of a sequence and the slices of tensors they select.

struct Chunk {
  std::int64_t pos0, len;
};

std::vector<Chunk> chunks_of(std::initializer_list<std::int64_t> lens) {
  std::vector<Chunk> c;
  std::int64_t pos = 0;
  for (std::int64_t n : lens) {
    c.push_back({pos, n});
    pos += n;
  }
  return c;
}

std::vector<Chunk> equal_chunks(std::int64_t T, std::int64_t C) {
  std::vector<Chunk> c;
  for (std::int64_t i = 0; i < C; ++i) c.push_back({i * (T / C), T / C});
  return c;
}

/// Positions c.pos0 .. c.pos0 + c.len − 1 of an [outer, T, row] layout: [B, T, N·D] activations, or the
/// [B, H, T] statistics seen as [B·H, T, 1].
template <typename V>
std::vector<V> take(const std::vector<V>& x, std::int64_t outer, std::int64_t T, std::int64_t row, Chunk c) {
  std::vector<V> part(static_cast<std::size_t>(outer * c.len * row));
  for (std::int64_t o = 0; o < outer; ++o)
    std::copy_n(x.begin() + (o * T + c.pos0) * row, c.len * row, part.begin() + o * c.len * row);
  return part;
}

template <typename V>
void put(std::vector<V>& x, const std::vector<V>& part, std::int64_t outer, std::int64_t T, std::int64_t row, Chunk c) {
  for (std::int64_t o = 0; o < outer; ++o)
    std::copy_n(part.begin() + o * c.len * row, c.len * row, x.begin() + (o * T + c.pos0) * row);
}

struct Layout {
  AttentionDims d;
  template <typename V>
  std::vector<V> q_rows(const std::vector<V>& x, Chunk c) const {
    return take(x, d.batch, d.seq, d.heads * d.head_dim, c);
  }
  template <typename V>
  std::vector<V> kv_rows(const std::vector<V>& x, Chunk c) const {
    return take(x, d.batch, d.seq, d.kv_heads * d.head_dim, c);
  }
  template <typename V>
  std::vector<V> stat_rows(const std::vector<V>& x, Chunk c) const {
    return take(x, d.batch * d.heads, d.seq, 1, c);
  }
  template <typename V>
  void put_q(std::vector<V>& x, const std::vector<V>& p, Chunk c) const {
    put(x, p, d.batch, d.seq, d.heads * d.head_dim, c);
  }
  template <typename V>
  void put_kv(std::vector<V>& x, const std::vector<V>& p, Chunk c) const {
    put(x, p, d.batch, d.seq, d.kv_heads * d.head_dim, c);
  }
  template <typename V>
  void put_stat(std::vector<V>& x, const std::vector<V>& p, Chunk c) const {
    put(x, p, d.batch * d.heads, d.seq, 1, c);
  }
};

std::size_t n_elems(std::int64_t B, std::int64_t T, std::int64_t N, std::int64_t D) {
  return static_cast<std::size_t>(B * T * N * D);
}
Shape q_shape(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D) { return {B, T, H, D}; }
Shape stat_shape(std::int64_t B, std::int64_t H, std::int64_t T) { return {B, H, T}; }

AttentionBlock pair_of(const AttentionDims& d, Chunk qc, Chunk kc, bool causal = true) {
  return {d.batch, qc.len, kc.len, d.heads, d.kv_heads, d.head_dim, qc.pos0, kc.pos0, causal};
}

// ------------------------------------------------------------------------------------------------
// The one-block kernels (the reference) and the blocked launchers driven over chunks.

template <typename T>
struct Inputs {
  std::vector<T> q, k, v, dout;
};

template <typename T>
Inputs<T> make_inputs(const AttentionDims& d, std::uint64_t seed) {
  const std::size_t nq = n_elems(d.batch, d.seq, d.heads, d.head_dim);
  const std::size_t nkv = n_elems(d.batch, d.seq, d.kv_heads, d.head_dim);
  // Scores of O(1..3) make the softmax far from uniform, so the running max really moves between blocks.
  return {test::random_uniform<T>(nq, seed, -2.0, 2.0), test::random_uniform<T>(nkv, seed + 1, -2.0, 2.0),
          test::random_uniform<T>(nkv, seed + 2), test::random_uniform<T>(nq, seed + 3)};
}

template <typename T>
struct Forward {
  std::vector<T> out;
  std::vector<acc_t<T>> lse;
};

template <typename T>
struct Backward {
  std::vector<T> dq, dk, dv;
};

template <typename T>
Forward<T> reference_fwd(const Inputs<T>& in, const AttentionDims& d) {
  Forward<T> f{std::vector<T>(in.q.size()), std::vector<acc_t<T>>(static_cast<std::size_t>(d.batch * d.heads * d.seq))};
  std::vector<std::byte> ws(attention_fwd_workspace_bytes(d, dtype_of_v<T>));
  const Shape qs = q_shape(d.batch, d.seq, d.heads, d.head_dim), ks = q_shape(d.batch, d.seq, d.kv_heads, d.head_dim);
  attention_fwd(view(f.out, qs), view(f.lse, stat_shape(d.batch, d.heads, d.seq)), cview(in.q, qs), cview(in.k, ks),
                cview(in.v, ks), d, ws, kHost);
  return f;
}

template <typename T>
Backward<T> reference_bwd(const Inputs<T>& in, const Forward<T>& f, const AttentionDims& d) {
  Backward<T> g{std::vector<T>(in.q.size()), std::vector<T>(in.k.size()), std::vector<T>(in.k.size())};
  std::vector<std::byte> ws(attention_bwd_workspace_bytes(d, dtype_of_v<T>));
  const Shape qs = q_shape(d.batch, d.seq, d.heads, d.head_dim), ks = q_shape(d.batch, d.seq, d.kv_heads, d.head_dim);
  attention_bwd(view(g.dq, qs), view(g.dk, ks), view(g.dv, ks), cview(in.dout, qs), cview(in.q, qs), cview(in.k, ks),
                cview(in.v, ks), cview(f.out, qs), cview(f.lse, stat_shape(d.batch, d.heads, d.seq)), d, ws, kHost);
  return g;
}

/// The state of one query block.
template <typename T>
struct State {
  std::vector<acc_t<T>> acc, m, l;
};

template <typename T>
State<T> init_state(const AttentionDims& qd) {
  State<T> st{std::vector<acc_t<T>>(n_elems(qd.batch, qd.seq, qd.heads, qd.head_dim)),
              std::vector<acc_t<T>>(static_cast<std::size_t>(qd.batch * qd.heads * qd.seq)),
              std::vector<acc_t<T>>(static_cast<std::size_t>(qd.batch * qd.heads * qd.seq))};
  attention_block_state_init(view(st.acc, q_shape(qd.batch, qd.seq, qd.heads, qd.head_dim)),
                             view(st.m, stat_shape(qd.batch, qd.heads, qd.seq)),
                             view(st.l, stat_shape(qd.batch, qd.heads, qd.seq)), qd, kHost);
  return st;
}

/// Folds the kv block `kv` (k and v of the block's k_len positions) into `st`.
template <typename T>
void fold(State<T>& st, const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
          const AttentionBlock& blk) {
  const Shape qs = q_shape(blk.batch, blk.q_len, blk.heads, blk.head_dim);
  const Shape ks = q_shape(blk.batch, blk.k_len, blk.kv_heads, blk.head_dim);
  const Shape ss = stat_shape(blk.batch, blk.heads, blk.q_len);
  std::vector<std::byte> ws(attention_block_fwd_workspace_bytes(blk, dtype_of_v<T>));
  attention_block_fwd(view(st.acc, qs), view(st.m, ss), view(st.l, ss), cview(q, qs), cview(k, ks), cview(v, ks), blk,
                      ws, kHost);
}

template <typename T>
Forward<T> finish(const State<T>& st, const AttentionDims& qd) {
  Forward<T> f{std::vector<T>(st.acc.size()), std::vector<acc_t<T>>(st.m.size())};
  const Shape qs = q_shape(qd.batch, qd.seq, qd.heads, qd.head_dim), ss = stat_shape(qd.batch, qd.heads, qd.seq);
  attention_block_finish(view(f.out, qs), view(f.lse, ss), cview(st.acc, qs), cview(st.m, ss), cview(st.l, ss), qd,
                         kHost);
  return f;
}

/// Which kv chunks each query chunk meets, in order: a ring's arrival order, or simply every chunk.
using Schedule = std::vector<std::pair<std::size_t, std::vector<std::size_t>>>;

Schedule every_pair(std::size_t C, bool reverse_kv) {
  Schedule s;
  for (std::size_t qc = 0; qc < C; ++qc) {
    std::vector<std::size_t> kv;
    for (std::size_t i = 0; i < C; ++i) kv.push_back(reverse_kv ? C - 1 - i : i);
    s.push_back({qc, kv});
  }
  return s;
}

/// The blocked forward of the scheduled query chunks; rows of other chunks are left NaN.
template <typename T>
Forward<T> blocked_fwd(const Inputs<T>& in, const AttentionDims& d, const std::vector<Chunk>& chunks,
                       const Schedule& schedule) {
  const Layout L{d};
  Forward<T> f{std::vector<T>(in.q.size(), test::from_double<T>(NAN)),
               std::vector<acc_t<T>>(static_cast<std::size_t>(d.batch * d.heads * d.seq), NAN)};
  for (const auto& [qi, kv_order] : schedule) {
    const Chunk qc = chunks[qi];
    const AttentionDims qd{d.batch, qc.len, d.heads, d.kv_heads, d.head_dim};
    const std::vector<T> q = L.q_rows(in.q, qc);
    State<T> st = init_state<T>(qd);
    for (std::size_t ki : kv_order)
      fold(st, q, L.kv_rows(in.k, chunks[ki]), L.kv_rows(in.v, chunks[ki]), pair_of(d, qc, chunks[ki]));
    const Forward<T> part = finish(st, qd);
    L.put_q(f.out, part.out, qc);
    L.put_stat(f.lse, part.lse, qc);
  }
  return f;
}

/// The blocked backward over the schedule, from the whole-sequence out and lse: dq rows of the scheduled
/// query chunks; dk and dv summed over them, each buffer overwritten by its first contribution, as a
/// ring passes the kv blocks' gradients along.
template <typename T>
Backward<T> blocked_bwd(const Inputs<T>& in, const Forward<T>& f, const AttentionDims& d,
                        const std::vector<Chunk>& chunks, const Schedule& schedule) {
  const Layout L{d};
  Backward<T> g{std::vector<T>(in.q.size(), test::from_double<T>(NAN)), std::vector<T>(in.k.size()),
                std::vector<T>(in.k.size())};
  std::vector<std::vector<T>> dk(chunks.size()), dv(chunks.size());
  std::vector<bool> seen(chunks.size(), false);
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    // NaN, so a buffer whose first contribution failed to overwrite it cannot pass.
    dk[c].assign(n_elems(d.batch, chunks[c].len, d.kv_heads, d.head_dim), test::from_double<T>(NAN));
    dv[c] = dk[c];
  }
  for (const auto& [qi, kv_order] : schedule) {
    const Chunk qc = chunks[qi];
    const AttentionDims qd{d.batch, qc.len, d.heads, d.kv_heads, d.head_dim};
    const Shape qs = q_shape(d.batch, qc.len, d.heads, d.head_dim), ss = stat_shape(d.batch, d.heads, qc.len);
    const std::vector<T> q = L.q_rows(in.q, qc), dout = L.q_rows(in.dout, qc), out = L.q_rows(f.out, qc);
    const std::vector<acc_t<T>> lse = L.stat_rows(f.lse, qc);
    std::vector<acc_t<T>> delta(lse.size());
    attention_row_delta(view(delta, ss), cview(dout, qs), cview(out, qs), qd, kHost);
    std::vector<T> dq(q.size(), test::from_double<T>(NAN));
    bool first_kv = true;
    for (std::size_t ki : kv_order) {
      const Chunk kc = chunks[ki];
      const AttentionBlock blk = pair_of(d, qc, kc);
      const Shape ks = q_shape(d.batch, kc.len, d.kv_heads, d.head_dim);
      std::vector<std::byte> ws(attention_block_bwd_workspace_bytes(blk, dtype_of_v<T>));
      attention_block_bwd(view(dq, qs), view(dk[ki], ks), view(dv[ki], ks), cview(dout, qs), cview(q, qs),
                          cview(L.kv_rows(in.k, kc), ks), cview(L.kv_rows(in.v, kc), ks), cview(lse, ss),
                          cview(delta, ss), blk, {.dq = !first_kv, .dkv = seen[ki]}, ws, kHost);
      first_kv = false;
      seen[ki] = true;
    }
    L.put_q(g.dq, dq, qc);
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    L.put_kv(g.dk, dk[c], chunks[c]);
    L.put_kv(g.dv, dv[c], chunks[c]);
  }
  return g;
}

// ------------------------------------------------------------------------------------------------
// The comparison and its bookkeeping.

/// max|a − e| / max|e|, the metric of every comparison here (NaN in either side fails).
template <typename A, typename E>
double error_of_max(const std::vector<A>& a, const std::vector<E>& e) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = test::to_double(a[i]), y = test::to_double(e[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    diff = std::max(diff, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return scale > 0 ? diff / scale : diff;
}

/// Checks error_of_max against a tolerance and keeps the worst value per quantity, recorded as a test
/// property when the test ends.
class WorstErrors {
 public:
  WorstErrors() = default;
  WorstErrors(const WorstErrors&) = delete;
  WorstErrors& operator=(const WorstErrors&) = delete;
  ~WorstErrors() {
    for (const auto& [key, value] : worst_) {
      std::ostringstream os;
      os.precision(3);
      os << std::scientific << value;
      ::testing::Test::RecordProperty(key, os.str());
    }
  }

  template <typename A, typename E>
  ::testing::AssertionResult check(const std::string& what, const std::vector<A>& a, const std::vector<E>& e,
                                   double tol) {
    if (a.size() != e.size())
      return ::testing::AssertionFailure() << what << ": size " << a.size() << " vs expected " << e.size();
    const double err = error_of_max(a, e);
    double& w = worst_[what];
    w = std::max(w, err);
    if (err <= tol) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": max|actual − expected| / max|expected| = " << err << " > "
                                         << tol;
  }

 private:
  std::map<std::string, double> worst_;
};

struct Tolerances {
  double out, lse, grad;
};

template <typename T>
constexpr Tolerances tolerances() {
  // bf16: out is rounded to bf16 (relative 2^-9) and dk/dv once per contributing query block.
  if constexpr (std::is_same_v<T, double>)
    return {1e-12, 1e-12, 1e-11};
  else if constexpr (std::is_same_v<T, float>)
    return {1e-5, 1e-5, 1e-4};
  else
    return {2e-2, 1e-5, 2e-2};
}

template <typename T>
std::string precision_name() {
  return std::string(dtype_name(dtype_of_v<T>));
}

std::string describe(const AttentionDims& d, const std::vector<Chunk>& chunks) {
  std::ostringstream os;
  os << "B=" << d.batch << " T=" << d.seq << " H=" << d.heads << " KV=" << d.kv_heads << " D=" << d.head_dim
     << " chunks";
  for (const Chunk& c : chunks) os << " " << c.len;
  return os.str();
}

// Two shapes: grouped-query heads with D a multiple of the 8-lane dot, and plain multi-head attention
// with an odd D (the dot's tail only).
const AttentionDims kShapes[] = {{2, 24, 4, 2, 8}, {2, 24, 3, 3, 5}};

std::vector<std::vector<Chunk>> splits() {
  std::vector<std::vector<Chunk>> s;
  for (std::int64_t C = 1; C <= 4; ++C) s.push_back(equal_chunks(24, C));
  s.push_back(chunks_of({5, 7, 12}));
  return s;
}

template <typename T>
void expect_blocked_matches_reference(WorstErrors& worst) {
  const Tolerances tol = tolerances<T>();
  const std::string p = precision_name<T>();
  for (const AttentionDims& d : kShapes) {
    const Inputs<T> in = make_inputs<T>(d, 101 + static_cast<std::uint64_t>(d.head_dim));
    const Forward<T> ref = reference_fwd(in, d);
    const Backward<T> ref_g = reference_bwd(in, ref, d);
    for (const auto& chunks : splits()) {
      SCOPED_TRACE(describe(d, chunks));
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(reverse ? "kv blocks last to first" : "kv blocks first to last");
        const Forward<T> got = blocked_fwd(in, d, chunks, every_pair(chunks.size(), reverse));
        EXPECT_TRUE(worst.check(p + " out", got.out, ref.out, tol.out));
        EXPECT_TRUE(worst.check(p + " lse", got.lse, ref.lse, tol.lse));
        if (reverse) continue;
        // End to end, as context parallelism runs it: the blocked out and lse feed the blocked backward.
        const Backward<T> g = blocked_bwd(in, got, d, chunks, every_pair(chunks.size(), false));
        EXPECT_TRUE(worst.check(p + " dq", g.dq, ref_g.dq, tol.grad));
        EXPECT_TRUE(worst.check(p + " dk", g.dk, ref_g.dk, tol.grad));
        EXPECT_TRUE(worst.check(p + " dv", g.dv, ref_g.dv, tol.grad));
      }
    }
  }
}

TEST(AttentionBlocks, ChunkedSequenceMatchesOneBlockAttentionInDouble) {
  WorstErrors worst;
  expect_blocked_matches_reference<double>(worst);
}

TEST(AttentionBlocks, ChunkedSequenceMatchesOneBlockAttentionInFp32) {
  WorstErrors worst;
  expect_blocked_matches_reference<float>(worst);
}

TEST(AttentionBlocks, ChunkedSequenceMatchesOneBlockAttentionInBf16) {
  WorstErrors worst;
  expect_blocked_matches_reference<bf16>(worst);
}

/// Context parallelism's load-balanced layout: T cut into 2·cp chunks, rank r holding chunks r and
/// 2cp − 1 − r (its queries and its keys), the kv chunk pairs arriving around the ring r, r − 1, ...
template <typename T>
void expect_load_balanced_layout_reproduces_reference(std::int64_t cp, WorstErrors& worst) {
  const AttentionDims d{2, 24, 4, 2, 8};
  const Tolerances tol = tolerances<T>();
  const std::string p = precision_name<T>() + " cp" + std::to_string(cp);
  const Layout L{d};
  const auto chunks = equal_chunks(d.seq, 2 * cp);
  const Inputs<T> in = make_inputs<T>(d, 303);
  const Forward<T> ref = reference_fwd(in, d);
  const Backward<T> ref_g = reference_bwd(in, ref, d);
  Forward<T> all{std::vector<T>(in.q.size()), std::vector<acc_t<T>>(ref.lse.size())};
  Backward<T> sum{std::vector<T>(in.q.size()), std::vector<T>(in.k.size()), std::vector<T>(in.k.size())};
  std::vector<double> dk(in.k.size(), 0.0), dv(in.k.size(), 0.0);
  std::int64_t visible_first = -1;
  for (std::int64_t r = 0; r < cp; ++r) {
    SCOPED_TRACE(::testing::Message() << "cp=" << cp << " rank " << r);
    const std::vector<std::size_t> mine{static_cast<std::size_t>(r), static_cast<std::size_t>(2 * cp - 1 - r)};
    std::vector<std::size_t> arrival;
    for (std::int64_t step = 0; step < cp; ++step) {
      const std::int64_t src = ((r - step) % cp + cp) % cp;
      arrival.push_back(static_cast<std::size_t>(src));
      arrival.push_back(static_cast<std::size_t>(2 * cp - 1 - src));
    }
    const Schedule schedule{{mine[0], arrival}, {mine[1], arrival}};
    // The point of the layout: every rank gets the same number of visible (query, key) pairs.
    std::int64_t visible = 0;
    for (std::size_t c : mine)
      for (std::int64_t t = chunks[c].pos0; t < chunks[c].pos0 + chunks[c].len; ++t) visible += t + 1;
    if (visible_first < 0) visible_first = visible;
    EXPECT_EQ(visible, visible_first);

    const Forward<T> f = blocked_fwd(in, d, chunks, schedule);
    const Backward<T> g = blocked_bwd(in, f, d, chunks, schedule);
    for (std::size_t c : mine) {
      EXPECT_TRUE(worst.check(p + " out rows", L.q_rows(f.out, chunks[c]), L.q_rows(ref.out, chunks[c]), tol.out));
      EXPECT_TRUE(
          worst.check(p + " lse rows", L.stat_rows(f.lse, chunks[c]), L.stat_rows(ref.lse, chunks[c]), tol.lse));
      EXPECT_TRUE(worst.check(p + " dq rows", L.q_rows(g.dq, chunks[c]), L.q_rows(ref_g.dq, chunks[c]), tol.grad));
      L.put_q(all.out, L.q_rows(f.out, chunks[c]), chunks[c]);
      L.put_stat(all.lse, L.stat_rows(f.lse, chunks[c]), chunks[c]);
      L.put_q(sum.dq, L.q_rows(g.dq, chunks[c]), chunks[c]);
    }
    // This rank's share of every kv chunk's gradient; the ring would carry it on to the owner.
    for (std::size_t i = 0; i < dk.size(); ++i) {
      dk[i] += test::to_double(g.dk[i]);
      dv[i] += test::to_double(g.dv[i]);
    }
  }
  EXPECT_TRUE(worst.check(p + " out", all.out, ref.out, tol.out));
  EXPECT_TRUE(worst.check(p + " lse", all.lse, ref.lse, tol.lse));
  EXPECT_TRUE(worst.check(p + " dq", sum.dq, ref_g.dq, tol.grad));
  EXPECT_TRUE(worst.check(p + " dk (summed over ranks)", dk, ref_g.dk, tol.grad));
  EXPECT_TRUE(worst.check(p + " dv (summed over ranks)", dv, ref_g.dv, tol.grad));
}

TEST(AttentionBlocks, LoadBalancedContextParallelLayoutReproducesTheReferenceRows) {
  WorstErrors worst;
  for (std::int64_t cp : {2, 3}) {
    expect_load_balanced_layout_reproduces_reference<double>(cp, worst);
    expect_load_balanced_layout_reproduces_reference<float>(cp, worst);
  }
}

// ------------------------------------------------------------------------------------------------
// Masked pairs.

template <typename V>
bool same_bits(const std::vector<V>& a, const std::vector<V>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(V)) == 0;
}

TEST(AttentionBlocks, FullyMaskedPairLeavesStateAndGradientsUntouched) {
  const AttentionDims d{2, 12, 4, 2, 8};
  const Layout L{d};
  const Chunk first{0, 6}, second{6, 6};
  const AttentionBlock masked = pair_of(d, first, second);
  ASSERT_TRUE(masked.fully_masked());
  ASSERT_FALSE(pair_of(d, second, first).fully_masked());
  const Inputs<float> in = make_inputs<float>(d, 401);
  const std::vector<float> q = L.q_rows(in.q, first), k = L.kv_rows(in.k, second), v = L.kv_rows(in.v, second);

  // A state that has already seen its own block, so "unchanged" is not just "still empty".
  const AttentionDims qd{d.batch, first.len, d.heads, d.kv_heads, d.head_dim};
  State<float> st = init_state<float>(qd);
  fold(st, q, L.kv_rows(in.k, first), L.kv_rows(in.v, first), pair_of(d, first, first));
  const State<float> before = st;
  fold(st, q, k, v, masked);
  EXPECT_TRUE(same_bits(st.acc, before.acc));
  EXPECT_TRUE(same_bits(st.m, before.m));
  EXPECT_TRUE(same_bits(st.l, before.l));

  const Shape qs = q_shape(d.batch, first.len, d.heads, d.head_dim),
              ks = q_shape(d.batch, second.len, d.kv_heads, d.head_dim);
  const Shape ss = stat_shape(d.batch, d.heads, first.len);
  const std::vector<float> dout = L.q_rows(in.dout, first);
  const std::vector<float> lse(static_cast<std::size_t>(d.batch * d.heads * first.len), 0.5f), delta = lse;
  const std::vector<float> dq0 = test::random_uniform<float>(q.size(), 402),
                           dk0 = test::random_uniform<float>(k.size(), 403),
                           dv0 = test::random_uniform<float>(v.size(), 404);
  std::vector<std::byte> ws(attention_block_bwd_workspace_bytes(masked, DType::f32));
  const auto run = [&](AttentionBlockAccumulate acc) {
    Backward<float> g{dq0, dk0, dv0};
    attention_block_bwd(view(g.dq, qs), view(g.dk, ks), view(g.dv, ks), cview(dout, qs), cview(q, qs), cview(k, ks),
                        cview(v, ks), cview(lse, ss), cview(delta, ss), masked, acc, ws, kHost);
    return g;
  };
  const std::vector<float> zq(q.size(), 0.0f), zk(k.size(), 0.0f);
  const Backward<float> added = run({.dq = true, .dkv = true});
  EXPECT_TRUE(same_bits(added.dq, dq0));
  EXPECT_TRUE(same_bits(added.dk, dk0));
  EXPECT_TRUE(same_bits(added.dv, dv0));
  // Overwriting still means "this pair's contribution", which is zero.
  const Backward<float> fresh = run({.dq = false, .dkv = false});
  EXPECT_TRUE(same_bits(fresh.dq, zq));
  EXPECT_TRUE(same_bits(fresh.dk, zk));
  EXPECT_TRUE(same_bits(fresh.dv, zk));
  const Backward<float> mixed = run({.dq = true, .dkv = false});
  EXPECT_TRUE(same_bits(mixed.dq, dq0));
  EXPECT_TRUE(same_bits(mixed.dk, zk));
}

TEST(AttentionBlocks, PartlyMaskedPairTouchesOnlyWhatItSees) {
  // Queries at positions 0..5, keys at 3..8: rows 0..2 see nothing, row t >= 3 sees keys 3..t, and keys
  // 6..8 are seen by no row.
  const AttentionDims d{1, 9, 2, 1, 4};
  const Layout L{d};
  const Chunk qc{0, 6}, kc{3, 6};
  const AttentionBlock blk = pair_of(d, qc, kc);
  const Inputs<double> in = make_inputs<double>(d, 501);
  const std::vector<double> q = L.q_rows(in.q, qc), k = L.kv_rows(in.k, kc), v = L.kv_rows(in.v, kc);
  const AttentionDims qd{d.batch, qc.len, d.heads, d.kv_heads, d.head_dim};
  State<double> st = init_state<double>(qd);
  fold(st, q, k, v, blk);
  const std::int64_t D = d.head_dim;
  for (std::int64_t h = 0; h < d.heads; ++h)
    for (std::int64_t i = 0; i < qc.len; ++i) {
      const std::size_t r = static_cast<std::size_t>(h * qc.len + i);
      if (i < 3) {
        EXPECT_EQ(st.m[r], -std::numeric_limits<double>::infinity()) << "head " << h << " row " << i;
        EXPECT_EQ(st.l[r], 0.0) << "head " << h << " row " << i;
        for (std::int64_t e = 0; e < D; ++e)
          EXPECT_EQ(st.acc[static_cast<std::size_t>((i * d.heads + h) * D + e)], 0.0);
      } else {
        EXPECT_GE(st.l[r], 1.0) << "head " << h << " row " << i;  // the row max contributes exp(0) = 1
      }
    }
  // Row 3 sees key 3 alone: weight exp(0) = 1 exactly, so its accumulator is that value row bit for bit.
  for (std::int64_t h = 0; h < d.heads; ++h) {
    EXPECT_EQ(st.l[static_cast<std::size_t>(h * qc.len + 3)], 1.0);
    for (std::int64_t e = 0; e < D; ++e)
      EXPECT_EQ(st.acc[static_cast<std::size_t>((3 * d.heads + h) * D + e)], v[static_cast<std::size_t>(e)]);
  }

  // Rows and keys outside the visible pairs keep their gradients when accumulating.
  const Shape qs = q_shape(1, qc.len, d.heads, D), ks = q_shape(1, kc.len, d.kv_heads, D),
              ss = stat_shape(1, d.heads, qc.len);
  const std::vector<double> dout = L.q_rows(in.dout, qc), lse(static_cast<std::size_t>(d.heads * qc.len), 1.0),
                            delta(lse.size(), 0.25);
  std::vector<double> dq = test::random_uniform<double>(q.size(), 502),
                      dk = test::random_uniform<double>(k.size(), 503),
                      dv = test::random_uniform<double>(v.size(), 504);
  const std::vector<double> dq0 = dq, dk0 = dk, dv0 = dv;
  std::vector<std::byte> ws(attention_block_bwd_workspace_bytes(blk, DType::f64));
  attention_block_bwd(view(dq, qs), view(dk, ks), view(dv, ks), cview(dout, qs), cview(q, qs), cview(k, ks),
                      cview(v, ks), cview(lse, ss), cview(delta, ss), blk, {.dq = true, .dkv = true}, ws, kHost);
  const std::size_t qrow = static_cast<std::size_t>(d.heads * D), krow = static_cast<std::size_t>(d.kv_heads * D);
  EXPECT_EQ(std::memcmp(dq.data(), dq0.data(), 3 * qrow * sizeof(double)), 0) << "dq of rows 0..2 changed";
  EXPECT_NE(std::memcmp(dq.data() + 3 * qrow, dq0.data() + 3 * qrow, 3 * qrow * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(dk.data() + 3 * krow, dk0.data() + 3 * krow, 3 * krow * sizeof(double)), 0)
      << "dk of keys 6..8 changed";
  EXPECT_EQ(std::memcmp(dv.data() + 3 * krow, dv0.data() + 3 * krow, 3 * krow * sizeof(double)), 0)
      << "dv of keys 6..8 changed";
  EXPECT_NE(std::memcmp(dv.data(), dv0.data(), 3 * krow * sizeof(double)), 0);

  // Overwriting, the same rows and keys get this pair's contribution: exactly zero.
  dq = dq0;
  dk = dk0;
  dv = dv0;
  attention_block_bwd(view(dq, qs), view(dk, ks), view(dv, ks), cview(dout, qs), cview(q, qs), cview(k, ks),
                      cview(v, ks), cview(lse, ss), cview(delta, ss), blk, {.dq = false, .dkv = false}, ws, kHost);
  for (std::size_t i = 0; i < 3 * qrow; ++i) EXPECT_EQ(dq[i], 0.0) << "dq[" << i << "]";
  for (std::size_t i = 3 * krow; i < 6 * krow; ++i) {
    EXPECT_EQ(dk[i], 0.0) << "dk[" << i << "]";
    EXPECT_EQ(dv[i], 0.0) << "dv[" << i << "]";
  }
}

TEST(AttentionBlocks, FinishGivesZeroAndMinusInfinityForRowsThatSawNoKey) {
  const AttentionDims d{1, 6, 2, 2, 3};
  const Layout L{d};
  const Chunk qc{0, 6}, kc{3, 3};
  const Inputs<float> in = make_inputs<float>(d, 601);
  const AttentionDims qd{1, 6, 2, 2, 3};
  State<float> st = init_state<float>(qd);
  for (float x : st.acc) EXPECT_EQ(x, 0.0f);
  for (float x : st.m) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  for (float x : st.l) EXPECT_EQ(x, 0.0f);
  fold(st, L.q_rows(in.q, qc), L.kv_rows(in.k, kc), L.kv_rows(in.v, kc), pair_of(d, qc, kc));
  const Forward<float> f = finish(st, qd);
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t i = 0; i < 6; ++i) {
      const float lse = f.lse[static_cast<std::size_t>(h * 6 + i)];
      if (i < 3) {
        EXPECT_EQ(lse, -std::numeric_limits<float>::infinity()) << "head " << h << " row " << i;
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << "head " << h << " row " << i;
      }
      for (std::int64_t e = 0; e < 3; ++e) {
        const float o = f.out[static_cast<std::size_t>((i * 2 + h) * 3 + e)];
        if (i < 3)
          EXPECT_EQ(o, 0.0f) << "head " << h << " row " << i;
        else
          EXPECT_TRUE(std::isfinite(o));
      }
    }
}

TEST(AttentionBlocks, RowDeltaIsDoutDotOutPerRow) {
  const AttentionDims d{2, 5, 3, 1, 7};
  const auto dout = test::random_uniform<double>(n_elems(2, 5, 3, 7), 701);
  const auto out = test::random_uniform<double>(dout.size(), 702);
  std::vector<double> delta(2 * 3 * 5), want(delta.size());
  attention_row_delta(view(delta, stat_shape(2, 3, 5)), cview(dout, q_shape(2, 5, 3, 7)),
                      cview(out, q_shape(2, 5, 3, 7)), d, kHost);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t t = 0; t < 5; ++t)
        for (std::int64_t e = 0; e < 7; ++e) {
          const std::size_t i = static_cast<std::size_t>(((b * 5 + t) * 3 + h) * 7 + e);
          want[static_cast<std::size_t>((b * 3 + h) * 5 + t)] += dout[i] * out[i];
        }
  EXPECT_TRUE(test::all_close(delta, want, 1e-14, 1e-15));
}

// ------------------------------------------------------------------------------------------------
// Non-causal blocks.

/// softmax(q kᵀ / √D) v over every key, per (batch, head), in double: Tq queries against Tk keys.
Forward<double> direct_softmax(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                               std::int64_t B, std::int64_t Tq, std::int64_t Tk, std::int64_t H, std::int64_t KV,
                               std::int64_t D) {
  Forward<double> f{std::vector<double>(n_elems(B, Tq, H, D)),
                    std::vector<double>(static_cast<std::size_t>(B * H * Tq))};
  std::vector<double> s(static_cast<std::size_t>(Tk));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / (H / KV);
      for (std::int64_t i = 0; i < Tq; ++i) {
        double m = -INFINITY, z = 0;
        for (std::int64_t j = 0; j < Tk; ++j) {
          double x = 0;
          for (std::int64_t e = 0; e < D; ++e)
            x += q[((b * Tq + i) * H + h) * D + e] * k[((b * Tk + j) * KV + g) * D + e];
          s[j] = x / std::sqrt(static_cast<double>(D));
          m = std::max(m, s[j]);
        }
        for (std::int64_t j = 0; j < Tk; ++j) z += std::exp(s[j] - m);
        f.lse[(b * H + h) * Tq + i] = m + std::log(z);
        for (std::int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j < Tk; ++j) o += std::exp(s[j] - m) / z * v[((b * Tk + j) * KV + g) * D + e];
          f.out[((b * Tq + i) * H + h) * D + e] = o;
        }
      }
    }
  return f;
}

/// Non-causal blocked forward of Tq queries (one block, at an arbitrary position) over Tk keys cut into
/// `kv_chunks`; positions must not matter.
Forward<double> blocked_noncausal(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, std::int64_t B, std::int64_t Tq, std::int64_t Tk,
                                  std::int64_t H, std::int64_t KV, std::int64_t D,
                                  const std::vector<Chunk>& kv_chunks) {
  const AttentionDims qd{B, Tq, H, KV, D};
  State<double> st = init_state<double>(qd);
  for (const Chunk& kc : kv_chunks) {
    const AttentionBlock blk{B, Tq, kc.len, H, KV, D, 100, 1000 + kc.pos0, false};
    fold(st, q, take(k, B, Tk, KV * D, kc), take(v, B, Tk, KV * D, kc), blk);
  }
  return finish(st, qd);
}

TEST(AttentionBlocks, NonCausalBlocksMatchADirectSoftmax) {
  WorstErrors worst;
  const std::int64_t B = 2, Tq = 10, Tk = 14, H = 4, KV = 2, D = 5;
  const auto q = test::random_uniform<double>(n_elems(B, Tq, H, D), 801, -2.0, 2.0);
  const auto k = test::random_uniform<double>(n_elems(B, Tk, KV, D), 802, -2.0, 2.0);
  const auto v = test::random_uniform<double>(n_elems(B, Tk, KV, D), 803);
  const Forward<double> want = direct_softmax(q, k, v, B, Tq, Tk, H, KV, D);
  for (const auto& kv_chunks : {chunks_of({14}), chunks_of({3, 5, 6}), chunks_of({6, 5, 3}), chunks_of({1, 12, 1})}) {
    const Forward<double> got = blocked_noncausal(q, k, v, B, Tq, Tk, H, KV, D, kv_chunks);
    EXPECT_TRUE(worst.check("fp64 out", got.out, want.out, 1e-12));
    EXPECT_TRUE(worst.check("fp64 lse", got.lse, want.lse, 1e-12));
  }
  // fp32 on the same (exactly representable after rounding) inputs, against the double oracle.
  const auto qf = convert<float>(q), kf = convert<float>(k), vf = convert<float>(v);
  const Forward<double> want32 =
      direct_softmax(convert<double>(qf), convert<double>(kf), convert<double>(vf), B, Tq, Tk, H, KV, D);
  State<float> st = init_state<float>({B, Tq, H, KV, D});
  for (const Chunk& kc : chunks_of({3, 5, 6}))
    fold(st, qf, take(kf, B, Tk, KV * D, kc), take(vf, B, Tk, KV * D, kc),
         AttentionBlock{B, Tq, kc.len, H, KV, D, 0, kc.pos0, false});
  const Forward<float> got32 = finish(st, {B, Tq, H, KV, D});
  EXPECT_TRUE(worst.check("fp32 out", got32.out, want32.out, 1e-5));
  EXPECT_TRUE(worst.check("fp32 lse", got32.lse, want32.lse, 1e-5));
}

TEST(AttentionBlocks, NonCausalBackwardMatchesFiniteDifferences) {
  // Two query blocks against two kv blocks, non-causal; L = <dout, out(q, k, v)> through the blocked forward.
  const std::int64_t B = 1, Tq = 5, Tk = 7, H = 2, KV = 1, D = 3;
  const std::vector<Chunk> q_chunks = chunks_of({2, 3}), kv_chunks = chunks_of({3, 4});
  std::vector<double> q = test::random_uniform<double>(n_elems(B, Tq, H, D), 901, -2.0, 2.0);
  std::vector<double> k = test::random_uniform<double>(n_elems(B, Tk, KV, D), 902, -2.0, 2.0);
  std::vector<double> v = test::random_uniform<double>(n_elems(B, Tk, KV, D), 903);
  const std::vector<double> dout = test::random_uniform<double>(q.size(), 904);
  const auto forward = [&] {
    std::vector<double> out(q.size());
    std::vector<double> lse(static_cast<std::size_t>(B * H * Tq));
    for (const Chunk& qc : q_chunks) {
      const Forward<double> f = blocked_noncausal(take(q, B, Tq, H * D, qc), k, v, B, qc.len, Tk, H, KV, D, kv_chunks);
      put(out, f.out, B, Tq, H * D, qc);
      put(lse, f.lse, B * H, Tq, 1, qc);
    }
    return Forward<double>{out, lse};
  };
  const Forward<double> f = forward();
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<std::vector<double>> dk_part(kv_chunks.size()), dv_part(kv_chunks.size());
  std::vector<bool> seen(kv_chunks.size(), false);
  for (const Chunk& qc : q_chunks) {
    const Shape qs = q_shape(B, qc.len, H, D), ss = stat_shape(B, H, qc.len);
    const auto qb = take(q, B, Tq, H * D, qc), dob = take(dout, B, Tq, H * D, qc), ob = take(f.out, B, Tq, H * D, qc);
    const auto lse = take(f.lse, B * H, Tq, 1, qc);
    std::vector<double> delta(lse.size()), dqb(qb.size());
    attention_row_delta(view(delta, ss), cview(dob, qs), cview(ob, qs), {B, qc.len, H, KV, D}, kHost);
    for (std::size_t c = 0; c < kv_chunks.size(); ++c) {
      const Chunk kc = kv_chunks[c];
      const AttentionBlock blk{B, qc.len, kc.len, H, KV, D, 50 + qc.pos0, kc.pos0, false};
      const Shape ks = q_shape(B, kc.len, KV, D);
      dk_part[c].resize(n_elems(B, kc.len, KV, D));
      dv_part[c].resize(dk_part[c].size());
      std::vector<std::byte> ws(attention_block_bwd_workspace_bytes(blk, DType::f64));
      attention_block_bwd(view(dqb, qs), view(dk_part[c], ks), view(dv_part[c], ks), cview(dob, qs), cview(qb, qs),
                          cview(take(k, B, Tk, KV * D, kc), ks), cview(take(v, B, Tk, KV * D, kc), ks), cview(lse, ss),
                          cview(delta, ss), blk, {.dq = c > 0, .dkv = seen[c]}, ws, kHost);
      seen[c] = true;
    }
    put(dq, dqb, B, Tq, H * D, qc);
  }
  for (std::size_t c = 0; c < kv_chunks.size(); ++c) {
    put(dk, dk_part[c], B, Tk, KV * D, kv_chunks[c]);
    put(dv, dv_part[c], B, Tk, KV * D, kv_chunks[c]);
  }
  const auto loss = [&] { return test::dot(dout, forward().out); };
  EXPECT_TRUE(test::check_gradient("dq", q, dq, loss));
  EXPECT_TRUE(test::check_gradient("dk", k, dk, loss));
  EXPECT_TRUE(test::check_gradient("dv", v, dv, loss));
}

// ------------------------------------------------------------------------------------------------
// Arguments.

TEST(AttentionBlocks, RejectsBadArgumentsNamingTheValues) {
  const AttentionDims d{2, 11, 4, 2, 3};
  const Chunk qc{5, 5}, kc{0, 6};
  const AttentionBlock blk = pair_of(d, qc, kc);
  const AttentionDims qd = blk.q_dims();
  const Layout L{d};
  const Inputs<float> in = make_inputs<float>(d, 1001);
  const std::vector<float> q = L.q_rows(in.q, qc), k = L.kv_rows(in.k, kc), v = L.kv_rows(in.v, kc),
                           dout = L.q_rows(in.dout, qc);
  const Shape qs = q_shape(2, 5, 4, 3), ks = q_shape(2, 6, 2, 3), ss = stat_shape(2, 4, 5);
  State<float> st = init_state<float>(qd);
  const std::vector<float> big(1000);  // backs views of the wrong shape or dtype, so the views themselves are valid
  std::vector<float> scratch(1000);
  std::vector<std::byte> fws(attention_block_fwd_workspace_bytes(blk, DType::f64));

  const auto fwd = [&](const AttentionBlock& b, ConstTensorView kk, TensorView row_max) {
    attention_block_fwd(view(st.acc, qs), row_max, view(st.l, ss), cview(q, qs), kk, cview(v, ks), b, fws, kHost);
  };
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        fwd(blk, cview(big, Shape{2, 5, 2, 3}), view(st.m, ss));
      },
      {"attention_block_fwd", "k has shape [2, 5, 2, 3]", "expected [2, 6, 2, 3]", "[12, 6]", "k_len=6", "kv_heads=2",
       "head_dim=3"}));
  EXPECT_TRUE(
      test::throws_with<PreconditionError>([&] { fwd(blk, cview(k, ks), TensorView(scratch.data(), ss, DType::bf16)); },
                                           {"attention_block_fwd", "row_max has dtype bf16", "expected fp32"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        fwd(blk, cview(k, ks), view(scratch, Shape{2, 5, 4}));
      },
      {"attention_block_fwd", "row_max has shape [2, 5, 4]", "expected [2, 4, 5]"}));
  AttentionBlock bad = blk;
  bad.kv_heads = 3;
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { fwd(bad, cview(k, ks), view(st.m, ss)); },
                                                   {"attention_block_fwd", "heads = 4", "kv_heads = 3"}));
  bad = blk;
  bad.q_pos0 = -1;
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { fwd(bad, cview(k, ks), view(st.m, ss)); },
                                                   {"attention_block_fwd", "q_pos0 = -1", "k_pos0 = 0"}));
  bad = blk;
  bad.k_len = 0;
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { fwd(bad, cview(k, ks), view(st.m, ss)); },
                                                   {"attention_block_fwd", "k_len = 0"}));
  // q in fp64 with an fp32 state: the state must be in q's accumulation dtype.
  const std::vector<double> qd64(q.size());
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_block_fwd(view(st.acc, qs), view(st.m, ss), view(st.l, ss), cview(qd64, qs),
                            ConstTensorView(big.data(), ks, DType::f64), ConstTensorView(big.data(), ks, DType::f64),
                            blk, fws, kHost);
      },
      {"attention_block_fwd", "acc has dtype fp32", "expected fp64"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_block_fwd(view(st.acc, qs), view(st.m, ss), view(st.l, ss), cview(q, qs), cview(k, ks), cview(v, ks),
                            blk, std::span<std::byte>(fws.data(), 16), kHost);
      },
      {"attention_block_fwd", "workspace"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_block_state_init(TensorView(scratch.data(), qs, DType::bf16), view(st.m, ss), view(st.l, ss), qd,
                                   kHost);
      },
      {"attention_block_state_init", "acc has dtype bf16", "expected fp32 or fp64"}));

  std::vector<float> out(q.size()), lse(st.m.size());
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_block_finish(view(out, qs), TensorView(scratch.data(), ss, DType::f64), cview(st.acc, qs),
                               cview(st.m, ss), cview(st.l, ss), qd, kHost);
      },
      {"attention_block_finish", "lse has dtype fp64", "expected fp32"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_block_finish(view(out, Shape{2, 5, 4, 2}), view(lse, ss), cview(st.acc, qs), cview(st.m, ss),
                               cview(st.l, ss), qd, kHost);
      },
      {"attention_block_finish", "out has shape [2, 5, 4, 2]", "expected [2, 5, 4, 3]", "seq=5", "heads=4"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        attention_row_delta(view(lse, ss), ConstTensorView(big.data(), qs, DType::bf16), cview(out, qs), qd, kHost);
      },
      {"attention_row_delta", "dout has dtype bf16", "expected fp32"}));

  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), delta(lse.size());
  std::vector<std::byte> ws(attention_block_bwd_workspace_bytes(blk, DType::f32));
  const auto bwd = [&](TensorView dkv, ConstTensorView lse_v, std::span<std::byte> w) {
    attention_block_bwd(view(dq, qs), dkv, view(dv, ks), cview(dout, qs), cview(q, qs), cview(k, ks), cview(v, ks),
                        lse_v, cview(delta, ss), blk, {}, w, kHost);
  };
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        bwd(view(dk, Shape{2, 6, 2, 2}), cview(lse, ss), ws);
      },
      {"attention_block_bwd", "dk has shape [2, 6, 2, 2]", "expected [2, 6, 2, 3]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        bwd(view(dk, ks), cview(big, Shape{2, 4, 11}), ws);
      },
      {"attention_block_bwd", "lse has shape [2, 4, 11]", "expected [2, 4, 5]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { bwd(view(dk, ks), cview(lse, ss), std::span(ws).first(8)); },
                                                   {"attention_block_bwd", "workspace of 8 bytes"}));
  EXPECT_NO_THROW(bwd(view(dk, ks), cview(lse, ss), ws));
}

// On a CUDA stream the launchers check everything they can on the host before enqueueing (the twins run on a GPU:
// test_cuda_attention_blocks.cpp); fp64, the CPU reference's type, is refused there by name, and a document mask
// of the wrong size too. The views below claim device memory that is host memory: nothing may read them.
TEST(AttentionBlocks, CudaStreamRefusesFp64AndBadArgumentsBeforeTheDevice) {
  const AttentionDims d{1, 4, 2, 1, 2};
  const AttentionBlock blk = pair_of(d, {0, 4}, {0, 4});
  const Device gpu = Device::cuda(0);
  const StreamRef cuda = StreamRef::wrap(gpu, nullptr);
  std::vector<double> buf(64);
  const TensorView a(buf.data(), Shape{1, 4, 2, 2}, DType::f64, gpu),
      kv(buf.data(), Shape{1, 4, 1, 2}, DType::f64, gpu);
  const TensorView r(buf.data(), Shape{1, 2, 4}, DType::f64, gpu);
  std::vector<std::byte> ws(1 << 16);
  // Each names the kernel, the argument, the dtype, the device and the fix.
  const std::string_view dev = "has dtype fp64 and the stream is on cuda:0", fix = "Fix: fp32 or bf16";
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { attention_block_state_init(a, r, r, d, cuda); },
                                                   {"attention_block_state_init: acc", dev, fix}));
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { attention_block_fwd(a, r, r, a, kv, kv, blk, ws, cuda); },
                                                   {"attention_block_fwd: q", dev, fix}));
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { attention_block_finish(a, r, a, r, r, d, cuda); },
                                                   {"attention_block_finish: out", dev, fix}));
  EXPECT_TRUE(test::throws_with<PreconditionError>([&] { attention_row_delta(r, a, a, d, cuda); },
                                                   {"attention_row_delta: out", dev, fix}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { attention_block_bwd(a, kv, kv, a, a, kv, kv, r, r, blk, {}, ws, cuda); },
      {"attention_block_bwd: q", dev, fix}));

  std::vector<float> fbuf(64);
  const TensorView fa(fbuf.data(), Shape{1, 4, 2, 2}, DType::f32, gpu),
      fkv(fbuf.data(), Shape{1, 4, 1, 2}, DType::f32, gpu), fr(fbuf.data(), Shape{1, 2, 4}, DType::f32, gpu);
  const std::vector<std::int32_t> first{0, 0, 2};  // 3 entries for 4 query rows
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { attention_block_fwd(fa, fr, fr, fa, fkv, fkv, blk, ws, cuda, first); },
      {"attention_block_fwd", "first holds 3", "4"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { attention_block_bwd(fa, fkv, fkv, fa, fa, fkv, fkv, fr, fr, blk, {}, ws, cuda, first); },
      {"attention_block_bwd", "first holds 3", "4"}));
  const TensorView host_q(fbuf.data(), Shape{1, 4, 2, 2}, DType::f32, Device::cpu());
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { attention_block_fwd(fa, fr, fr, host_q, fkv, fkv, blk, ws, cuda); },
      {"attention_block_fwd", "q is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
