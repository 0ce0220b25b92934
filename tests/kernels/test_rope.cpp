// Tests of the RoPE family: the forward against an independent closed form (each rotate-half pair as
// a complex number multiplied by e^{i·pos·base^(-2j/d)}), the backward as the inverse rotation and
// against finite differences, positions wrapping at seq_len, fp32/bf16 tolerances, edge sizes, and
// rejected arguments; the launcher (a cached table of angles, token rows over the intra-op pool) with the
// reference's bits, forward and backward, every dtype, repeated shapes. The explicit-position form (rope_*_at) against rope_fwd/bwd bit for bit, on
// t mod seq_len and on the load-balanced context-parallel shards, and its own refusals.
#include <cmath>
#include <complex>
#include <cstring>
#include <cstdint>
#include <ostream>
#include <set>
#include <vector>

#include "hzp/kernels/rope.hpp"
#include "kernel_test_util.hpp"
#include "rope/rope_ref.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

struct Dims {
  std::int64_t tokens, heads, head_dim, seq_len;
  std::int64_t numel() const { return tokens * heads * head_dim; }
  Shape shape() const { return {tokens, heads, head_dim}; }
};
// Readable parameter values in gtest and CTest test names.
void PrintTo(const Dims& d, std::ostream* os) {
  *os << "tokens=" << d.tokens << " heads=" << d.heads << " head_dim=" << d.head_dim << " seq_len=" << d.seq_len;
}

// Closed form, written independently of the kernel: pair (x[j], x[j + d/2]) is the complex number
// x[j] + i·x[j + d/2]; RoPE multiplies it by e^{i·θ}, θ = pos·base^(−2j/d), pos = t mod seq_len.
std::vector<double> rope_closed_form(const std::vector<double>& x, const Dims& d, double base) {
  std::vector<double> y(x.size());
  const std::int64_t half = d.head_dim / 2;
  for (std::int64_t t = 0; t < d.tokens; ++t)
    for (std::int64_t h = 0; h < d.heads; ++h)
      for (std::int64_t j = 0; j < half; ++j) {
        const double theta = static_cast<double>(t % d.seq_len) / std::pow(base, 2.0 * j / d.head_dim);
        const std::int64_t o = (t * d.heads + h) * d.head_dim;
        const std::complex<double> z = std::complex<double>(x[o + j], x[o + j + half]) * std::polar(1.0, theta);
        y[o + j] = z.real();
        y[o + j + half] = z.imag();
      }
  return y;
}

class RopeClosedForm : public ::testing::TestWithParam<std::tuple<Dims, double>> {};

TEST_P(RopeClosedForm, ForwardMatchesAndBackwardInverts) {
  const auto [d, base] = GetParam();
  const auto x = test::random_uniform<double>(d.numel(), 1);
  std::vector<double> y(d.numel()), back(d.numel());
  rope_fwd(view(y, d.shape()), cview(x, d.shape()), d.seq_len, base, kHost);
  EXPECT_TRUE(test::all_close(y, rope_closed_form(x, d, base), 1e-13, 1e-14));
  rope_bwd(view(back, d.shape()), cview(y, d.shape()), d.seq_len, base, kHost);
  EXPECT_TRUE(test::all_close(back, x, 1e-13, 1e-14)) << "rope_bwd is not the inverse rotation";
}

// Edge cases: head_dim 2 (one pair), one head, sequence length 1 (every position 0), Llama 3's base.
INSTANTIATE_TEST_SUITE_P(Shapes, RopeClosedForm,
                         ::testing::Values(std::tuple{Dims{8, 3, 16, 4}, 10000.0}, std::tuple{Dims{6, 1, 2, 6}, 10000.0},
                                           std::tuple{Dims{3, 2, 8, 1}, 10000.0},
                                           std::tuple{Dims{64, 2, 32, 64}, 500000.0}));

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const Dims d{6, 2, 8, 3};
  auto x = test::random_uniform<double>(d.numel(), 2);
  const auto dy = test::random_uniform<double>(d.numel(), 3);
  std::vector<double> y(d.numel()), dx(d.numel());
  rope_bwd(view(dx, d.shape()), cview(dy, d.shape()), d.seq_len, 10000.0, kHost);
  auto loss = [&] {
    rope_fwd(view(y, d.shape()), cview(x, d.shape()), d.seq_len, 10000.0, kHost);
    return test::dot(dy, y);
  };
  EXPECT_TRUE(test::check_gradient("x", x, dx, loss));
}

// Token t and token t + seq_len (next sequence in the batch) share a position: same input, same output;
// position 0 is the identity, bit for bit.
TEST(Rope, PositionsWrapAtSeqLen) {
  const Dims d{12, 2, 8, 4};
  const std::int64_t row = d.heads * d.head_dim;
  auto x = test::random_uniform<float>(d.numel(), 4);
  for (std::int64_t t = d.seq_len; t < d.tokens; ++t)
    std::memcpy(&x[t * row], &x[(t % d.seq_len) * row], row * sizeof(float));
  std::vector<float> y(d.numel());
  rope_fwd(view(y, d.shape()), cview(x, d.shape()), d.seq_len, 10000.0, kHost);
  for (std::int64_t t = d.seq_len; t < d.tokens; ++t)
    EXPECT_EQ(0, std::memcmp(&y[t * row], &y[(t % d.seq_len) * row], row * sizeof(float))) << "token " << t;
  for (std::int64_t t = 0; t < d.tokens; t += d.seq_len)
    EXPECT_EQ(0, std::memcmp(&y[t * row], &x[t * row], row * sizeof(float))) << "position 0 of token " << t;
}

TEST(Rope, SeqLenOneIsIdentity) {
  const Dims d{5, 3, 4, 1};
  const auto x = test::random_uniform<bf16>(d.numel(), 5);
  std::vector<bf16> y(d.numel());
  rope_fwd(view(y, d.shape()), cview(x, d.shape()), d.seq_len, 10000.0, kHost);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i].bits, x[i].bits) << i;
}

TEST(Rope, InPlaceEqualsOutOfPlace) {
  const Dims d{8, 2, 16, 8};
  auto x = test::random_uniform<float>(d.numel(), 6);
  std::vector<float> y(d.numel());
  rope_fwd(view(y, d.shape()), cview(x, d.shape()), d.seq_len, 10000.0, kHost);
  rope_fwd(view(x, d.shape()), cview(x, d.shape()), d.seq_len, 10000.0, kHost);
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
}

// The launcher rotates through a table of angles built once per (seq_len, head_dim, base): the same bits as the
// reference's per-call trigonometry, for every dtype, both directions, several sequences, in place, and a second
// call on the same shape (the cached table) or another base (another table).
template <typename T>
void expect_launcher_gives_reference_bits(const Dims& d, double base) {
  const auto x = test::random_uniform<T>(d.numel(), 21);
  for (bool inverse : {false, true}) {
    std::vector<T> want(x.size());
    rope_rotate_ref(want.data(), x.data(), d.tokens, d.heads, d.head_dim, d.seq_len, base, inverse);
    for (int call = 0; call < 2; ++call) {
      auto y = x;  // in place
      if (inverse)
        rope_bwd(view(y, d.shape()), cview(y, d.shape()), d.seq_len, base, kHost);
      else
        rope_fwd(view(y, d.shape()), cview(y, d.shape()), d.seq_len, base, kHost);
      EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(T))) << "inverse " << inverse << " call " << call;
    }
  }
}

TEST(Rope, LauncherGivesTheReferenceBits) {
  for (double base : {10000.0, 500000.0}) {
    expect_launcher_gives_reference_bits<float>({3 * 37, 4, 64, 37}, base);
    expect_launcher_gives_reference_bits<bf16>({2 * 29, 2, 16, 29}, base);
    expect_launcher_gives_reference_bits<double>({2 * 11, 3, 8, 11}, base);
  }
}

// fp32: cos/sin rounded to fp32 (2^-24), two products and a sum per output: about 3u·(|x1| + |x2|)
// absolute, under 4e-7 for inputs in [-1, 1].
// bf16: the same fp32 result rounded once to bf16, so 2^-8 relative on top (plus an absolute floor
// for outputs where the two terms cancel).
TEST(Rope, Fp32AndBf16MatchDouble) {
  const Dims d{32, 4, 64, 32};
  const auto x32 = test::random_uniform<float>(d.numel(), 7);
  const auto x16 = test::convert<bf16>(x32);
  std::vector<float> y32(d.numel()), dx32(d.numel());
  std::vector<bf16> y16(d.numel());
  rope_fwd(view(y32, d.shape()), cview(x32, d.shape()), d.seq_len, 10000.0, kHost);
  rope_bwd(view(dx32, d.shape()), cview(x32, d.shape()), d.seq_len, 10000.0, kHost);
  rope_fwd(view(y16, d.shape()), cview(x16, d.shape()), d.seq_len, 10000.0, kHost);

  const auto truth32 = rope_closed_form(test::convert<double>(x32), d, 10000.0);
  const auto truth16 = rope_closed_form(test::convert<double>(x16), d, 10000.0);
  std::vector<double> back_truth(d.numel());
  rope_bwd_ref(back_truth.data(), test::convert<double>(x32).data(), d.tokens, d.heads, d.head_dim, d.seq_len,
               10000.0);
  EXPECT_TRUE(test::all_close(y32, truth32, 1e-6, 4e-7));
  EXPECT_TRUE(test::all_close(dx32, back_truth, 1e-6, 4e-7));
  EXPECT_TRUE(test::all_close(y16, truth16, 0x1p-8 + 1e-6, 1e-6));
}

TEST(Rope, RejectsBadArguments) {
  std::vector<float> f(512);
  std::vector<double> g(512);
  auto fwd = [&](Shape in, Shape out, std::int64_t seq_len, double base) {
    return [=, &f] { rope_fwd(view(f, out), cview(f, in), seq_len, base, kHost); };
  };
  EXPECT_TRUE(test::throws_with(fwd({4, 2, 5}, {4, 2, 5}, 4, 1e4), {"rope_fwd: head_dim = 5 must be even"}));
  EXPECT_TRUE(test::throws_with(fwd({7, 2, 8}, {7, 2, 8}, 4, 1e4),
                                {"rope_fwd: tokens = 7 is not a multiple of seq_len = 4"}));
  EXPECT_TRUE(test::throws_with(fwd({8, 16}, {8, 16}, 4, 1e4),
                                {"rope_fwd: input must be 3-D [tokens, heads, head_dim], got shape [8, 16]"}));
  EXPECT_TRUE(test::throws_with(fwd({4, 2, 8}, {4, 2, 6}, 4, 1e4),
                                {"rope_fwd: output has shape [4, 2, 6], expected [4, 2, 8]"}));
  EXPECT_TRUE(test::throws_with(fwd({4, 2, 8}, {4, 2, 8}, 0, 1e4), {"rope_fwd: seq_len = 0 must be positive"}));
  EXPECT_TRUE(test::throws_with(fwd({4, 0, 8}, {4, 0, 8}, 4, 1e4), {"rope_fwd: heads = 0 must be positive"}));
  EXPECT_TRUE(test::throws_with(fwd({4, 2, 8}, {4, 2, 8}, 4, 0.0), {"rope_fwd: base = 0 must be > 0"}));
  EXPECT_TRUE(test::throws_with(
      [&] { rope_bwd(view(g, {4, 2, 8}), cview(f, {4, 2, 8}), 4, 1e4, kHost); },
      {"rope_bwd: output has dtype fp64, expected fp32"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_fwd(view(f, {4, 2, 8}), cview(f, {4, 2, 8}), 4, 1e4, StreamRef::wrap(Device::cuda(0), nullptr)); },
      {"rope_fwd", "is on cpu but the stream is on cuda:0"}));
}

// ------------------------------------------------------------------------------------------------
// Explicit positions (rope_fwd_at / rope_bwd_at).

std::vector<std::int32_t> mod_positions(std::int64_t tokens, std::int64_t seq_len) {
  std::vector<std::int32_t> p(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) p[t] = static_cast<std::int32_t>(t % seq_len);
  return p;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Bitwise, not close: a context-parallel run is compared against a single-rank run, which only holds
// if the shard form rounds exactly as the whole-sequence form does.
template <typename T>
void expect_mod_positions_match(const Dims& d, double base) {
  const auto x = test::random_uniform<T>(d.numel(), 11);
  const auto pos = mod_positions(d.tokens, d.seq_len);
  const Shape pshape{d.tokens};
  std::vector<T> y(d.numel()), y_at(d.numel()), dx(d.numel()), dx_at(d.numel());
  rope_fwd(view(y, d.shape()), cview(x, d.shape()), d.seq_len, base, kHost);
  rope_fwd_at(view(y_at, d.shape()), cview(x, d.shape()), cview(pos, pshape), base, kHost);
  EXPECT_TRUE(same_bits(y, y_at)) << "rope_fwd_at differs from rope_fwd";
  rope_bwd(view(dx, d.shape()), cview(x, d.shape()), d.seq_len, base, kHost);
  rope_bwd_at(view(dx_at, d.shape()), cview(x, d.shape()), cview(pos, pshape), base, kHost);
  EXPECT_TRUE(same_bits(dx, dx_at)) << "rope_bwd_at differs from rope_bwd";
  auto in_place = x;
  rope_fwd_at(view(in_place, d.shape()), cview(in_place, d.shape()), cview(pos, pshape), base, kHost);
  EXPECT_TRUE(same_bits(y, in_place)) << "rope_fwd_at in place differs";
}

TEST(RopeAt, ModSeqLenPositionsEqualRopeFwdBitwise) {
  for (const Dims& d : {Dims{12, 3, 16, 4}, Dims{64, 2, 32, 64}, Dims{6, 1, 2, 6}}) {
    SCOPED_TRACE(::testing::PrintToString(d));
    expect_mod_positions_match<double>(d, 10000.0);
    expect_mod_positions_match<float>(d, 500000.0);
    expect_mod_positions_match<bf16>(d, 10000.0);
  }
}

/// The token rows rank `rank` of `cp` holds under the load-balanced layout: each sequence is cut into
/// 2·cp equal chunks and the rank takes chunks rank and 2·cp−1−rank (so every rank gets the same share
/// of causal-attention work), sequence after sequence. Returns the global row of each local row.
std::vector<std::int64_t> cp_rows(std::int64_t batch, std::int64_t seq_len, std::int64_t cp, std::int64_t rank) {
  const std::int64_t chunk = seq_len / (2 * cp);
  std::vector<std::int64_t> rows;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t c : {rank, 2 * cp - 1 - rank})
      for (std::int64_t i = 0; i < chunk; ++i) rows.push_back(b * seq_len + c * chunk + i);
  return rows;
}

template <typename T>
void expect_cp_shards_match(std::int64_t cp, double base) {
  const std::int64_t batch = 2, seq_len = 24, heads = 3, head_dim = 8, row = heads * head_dim;
  const Dims whole{batch * seq_len, heads, head_dim, seq_len};
  const auto x = test::random_uniform<T>(whole.numel(), 12);
  const auto dy = test::random_uniform<T>(whole.numel(), 13);
  std::vector<T> y(whole.numel()), dx(whole.numel());
  rope_fwd(view(y, whole.shape()), cview(x, whole.shape()), seq_len, base, kHost);
  rope_bwd(view(dx, whole.shape()), cview(dy, whole.shape()), seq_len, base, kHost);

  std::set<std::int64_t> covered;
  for (std::int64_t r = 0; r < cp; ++r) {
    SCOPED_TRACE("cp = " + std::to_string(cp) + ", rank " + std::to_string(r));
    const auto rows = cp_rows(batch, seq_len, cp, r);
    const std::int64_t local = static_cast<std::int64_t>(rows.size());
    ASSERT_EQ(local, 2 * batch * seq_len / (2 * cp));
    const Shape shape{local, heads, head_dim};
    std::vector<T> xs(local * row), dys(local * row), ys(local * row), dxs(local * row), want_y(local * row),
        want_dx(local * row);
    std::vector<std::int32_t> pos(local);
    for (std::int64_t i = 0; i < local; ++i) {
      const std::int64_t g = rows[i];
      covered.insert(g);
      pos[i] = static_cast<std::int32_t>(g % seq_len);
      std::memcpy(&xs[i * row], &x[g * row], row * sizeof(T));
      std::memcpy(&dys[i * row], &dy[g * row], row * sizeof(T));
      std::memcpy(&want_y[i * row], &y[g * row], row * sizeof(T));
      std::memcpy(&want_dx[i * row], &dx[g * row], row * sizeof(T));
    }
    rope_fwd_at(view(ys, shape), cview(xs, shape), cview(pos, {local}), base, kHost);
    rope_bwd_at(view(dxs, shape), cview(dys, shape), cview(pos, {local}), base, kHost);
    EXPECT_TRUE(same_bits(ys, want_y)) << "forward rows differ from the whole sequences'";
    EXPECT_TRUE(same_bits(dxs, want_dx)) << "backward rows differ from the whole sequences'";
  }
  // The shards partition the batch: a layout bug that dropped or repeated a chunk would otherwise pass.
  EXPECT_EQ(static_cast<std::int64_t>(covered.size()), batch * seq_len);
}

TEST(RopeAt, ContextParallelShardsMatchWholeSequences) {
  for (std::int64_t cp : {2, 3}) {
    expect_cp_shards_match<double>(cp, 10000.0);
    expect_cp_shards_match<float>(cp, 10000.0);
    expect_cp_shards_match<bf16>(cp, 500000.0);
  }
}

// Positions unrelated to any seq_len and far beyond the test sizes above (the angle is computed in
// double, so large positions must not cost accuracy).
std::vector<std::int32_t> scattered_positions(std::int64_t tokens) {
  auto p = test::random_ints(tokens, 21, 0, 1 << 20);
  p[0] = 0;
  return p;
}

TEST(RopeAt, BackwardInvertsForward) {
  const Dims d{10, 3, 16, 1};
  const auto pos = scattered_positions(d.tokens);
  const auto x = test::random_uniform<double>(d.numel(), 22);
  std::vector<double> y(d.numel()), back(d.numel());
  rope_fwd_at(view(y, d.shape()), cview(x, d.shape()), cview(pos, {d.tokens}), 10000.0, kHost);
  rope_bwd_at(view(back, d.shape()), cview(y, d.shape()), cview(pos, {d.tokens}), 10000.0, kHost);
  EXPECT_TRUE(test::all_close(back, x, 0.0, 1e-14)) << "rope_bwd_at is not the inverse of rope_fwd_at";
}

// A rotation's adjoint is its inverse: <R x, w> = <x, R⁻¹ w>, which is what makes rope_bwd_at the
// gradient of rope_fwd_at; finite differences check the same thing without relying on linear algebra.
TEST(RopeAt, BackwardIsTheTransposeAndMatchesFiniteDifferences) {
  const Dims d{7, 2, 8, 1};
  const auto pos = scattered_positions(d.tokens);
  auto x = test::random_uniform<double>(d.numel(), 23);
  const auto w = test::random_uniform<double>(d.numel(), 24);
  std::vector<double> y(d.numel()), dx(d.numel());
  rope_bwd_at(view(dx, d.shape()), cview(w, d.shape()), cview(pos, {d.tokens}), 10000.0, kHost);
  auto loss = [&] {
    rope_fwd_at(view(y, d.shape()), cview(x, d.shape()), cview(pos, {d.tokens}), 10000.0, kHost);
    return test::dot(w, y);
  };
  EXPECT_NEAR(loss(), test::dot(x, dx), 1e-12);
  EXPECT_TRUE(test::check_gradient("x", x, dx, loss));
}

TEST(RopeAt, RejectsBadArguments) {
  std::vector<float> f(512);
  std::vector<double> g(512);
  std::vector<std::int32_t> pos(16, 0);
  std::vector<std::int64_t> pos64(16, 0);
  const Shape x{4, 2, 8};
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_fwd_at(view(f, x), cview(f, x), cview(pos64, {4}), 1e4, kHost); },
      {"rope_fwd_at: positions has dtype int64, expected int32"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_fwd_at(view(f, x), cview(f, x), cview(pos, {5}), 1e4, kHost); },
      {"rope_fwd_at: positions has shape [5], expected [4] (one position per token row"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_fwd_at(view(f, x), cview(f, x), cview(pos, {4, 1}), 1e4, kHost); },
      {"rope_fwd_at: positions has shape [4, 1], expected [4]"}));
  pos[2] = -3;
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_bwd_at(view(f, x), cview(f, x), cview(pos, {4}), 1e4, kHost); },
      {"rope_bwd_at: positions[2] = -3 is negative"}));
  pos[2] = 0;
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_fwd_at(view(f, {4, 2, 5}), cview(f, {4, 2, 5}), cview(pos, {4}), 1e4, kHost); },
      {"rope_fwd_at: head_dim = 5 must be even"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_bwd_at(view(g, x), cview(f, x), cview(pos, {4}), 1e4, kHost); },
      {"rope_bwd_at: output has dtype fp64, expected fp32"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { rope_fwd_at(view(f, x), cview(f, x), cview(pos, {4}), -1.0, kHost); },
      {"rope_fwd_at: base = -1 must be > 0"}));
  // On a CUDA stream the positions must be device memory too (the kernel reads them there); refused before any
  // launch, so no GPU is needed to check it.
  const StreamRef cuda = StreamRef::wrap(Device::cuda(0), nullptr);
  const TensorView on_gpu(f.data(), x, DType::f32, Device::cuda(0));
  for (auto [name, call] : {std::pair<const char*, void (*)(TensorView, ConstTensorView, ConstTensorView, double,
                                                            StreamRef)>{"rope_fwd_at", rope_fwd_at},
                            {"rope_bwd_at", rope_bwd_at}})
    EXPECT_TRUE(test::throws_with<PreconditionError>(
        [&] { call(on_gpu, on_gpu, cview(pos, {4}), 1e4, cuda); },
        {name, ": positions is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
