// kernels::add on the CPU: fp32 and fp64 exact sums, bf16 rounded once from the fp32 sum, in place,
// and the errors for mismatched dtypes, sizes and devices.
#include <gtest/gtest.h>

#include <vector>

#include "hzp/kernels/add.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

TEST(Add, SumsElementwiseAndRoundsBf16Once) {
  auto a = test::random_normal<float>(37, 1), b = test::random_normal<float>(37, 2);
  std::vector<float> out(37);
  add(view(out, {37}), cview(a, {37}), cview(b, {37}), StreamRef::host());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  auto ab = test::convert<bf16>(a), bb = test::convert<bf16>(b);
  add(view(ab, {37}), cview(ab, {37}), cview(bb, {37}), StreamRef::host());  // in place
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(ab[i].bits, bf16::from_float(float(test::convert<bf16>(a)[i]) + float(bb[i])).bits) << i;
}

TEST(Add, RejectsMismatchedArguments) {
  std::vector<float> f(8);
  std::vector<double> d(8);
  EXPECT_TRUE(test::throws_with([&] { add(view(f, {8}), cview(f, {8}), cview(d, {8}), StreamRef::host()); },
                                {"add: dtypes fp32, fp32, fp64 differ"}));
  EXPECT_TRUE(test::throws_with([&] { add(view(f, {8}), cview(f, {4}), cview(f, {8}), StreamRef::host()); },
                                {"add: element counts 8, 4, 8 differ"}));
  EXPECT_TRUE(test::throws_with(
      [&] { add(view(f, {8}), cview(f, {8}), cview(f, {8}), StreamRef::wrap(Device::cuda(0), nullptr)); },
      {"add", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
