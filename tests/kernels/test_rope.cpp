// Tests of the RoPE family: the forward against an independent closed form (each rotate-half pair as
// a complex number multiplied by e^{i·pos·base^(-2j/d)}), the backward as the inverse rotation and
// against finite differences, positions wrapping at seq_len, fp32/bf16 tolerances, edge sizes, and
// rejected arguments.
#include <cmath>
#include <complex>
#include <cstring>
#include <ostream>
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

}  // namespace
}  // namespace hzp::kernels
