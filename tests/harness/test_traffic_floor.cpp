// The traffic floor's loops compute what they claim (traffic_floor.hpp): the rank's own input reaches its place,
// every other block of the output is written (from the zero staging piece), the reductions give the sum over the
// ranks' blocks (checked against sums written out here), bf16 rounds once, and the broadcast root writes nothing. A
// floor that skipped work would time faster than the op's true minimum and flatter every transport.
#include <gtest/gtest.h>

#include <vector>

#include "hzp/core/error.hpp"
#include "traffic_floor.hpp"

namespace hzp::harness {
namespace {

using coll::CollOp;

std::vector<float> iota_like(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7) % 13) - 3.0f;
  return v;
}

const std::byte* bytes(const std::vector<float>& v) { return reinterpret_cast<const std::byte*>(v.data()); }
std::byte* bytes(std::vector<float>& v) { return reinterpret_cast<std::byte*>(v.data()); }

TEST(TrafficFloor, CopiesAndDeliveriesWriteEveryElement) {
  const int w = 4, rank = 1;
  const std::size_t block = 1250, n = block * w;  // not a multiple of the reduction's piece
  const auto src = iota_like(n);
  std::vector<float> gathered(n, -99.0f);
  run_traffic_floor(CollOp::all_gather, DType::f32, n, w, rank, 0, bytes(src), bytes(gathered));
  for (std::size_t i = 0; i < n; ++i) {
    const bool own = i / block == static_cast<std::size_t>(rank);
    ASSERT_EQ(gathered[i], own ? src[i - rank * block] : 0.0f) << i;  // the rank's input, or a peer's delivery
  }
  std::vector<float> exchanged(n, -99.0f);
  run_traffic_floor(CollOp::all_to_all, DType::f32, n, w, rank, 0, bytes(src), bytes(exchanged));
  EXPECT_EQ(exchanged, src);
  // Larger than the staging piece, so the deliveries take several passes.
  const std::size_t big = 3 * kFloorStagingBytes / sizeof(float) + 17;
  const auto big_src = iota_like(big);
  std::vector<float> root_dst(big, -99.0f), other_dst(big, -99.0f);
  run_traffic_floor(CollOp::broadcast, DType::f32, big, w, 2, 2, bytes(big_src), bytes(root_dst));
  run_traffic_floor(CollOp::broadcast, DType::f32, big, w, 3, 2, bytes(big_src), bytes(other_dst));
  EXPECT_EQ(root_dst, std::vector<float>(big, -99.0f));  // the root sends; it writes nothing
  EXPECT_EQ(other_dst, std::vector<float>(big, 0.0f));    // and the root's read left the staging piece zero
}

TEST(TrafficFloor, ReduceScatterSumsEveryRanksBlock) {
  const int w = 3;
  const std::size_t block = 4099, total = block * w;
  const auto src = iota_like(total);
  std::vector<float> dst(block, -99.0f);
  run_traffic_floor(CollOp::reduce_scatter, DType::f32, total, w, 0, 0, bytes(src), bytes(dst));
  for (std::size_t i = 0; i < block; ++i)
    ASSERT_EQ(dst[i], src[i] + src[block + i] + src[2 * block + i]) << i;
}

TEST(TrafficFloor, AllReduceReducesItsOwnBlockAndWritesTheOthers) {
  const int w = 4, rank = 2;
  const std::size_t block = 3000, total = block * w;
  const auto src = iota_like(total);
  std::vector<float> dst(total, -99.0f);
  run_traffic_floor(CollOp::all_reduce, DType::f32, total, w, rank, 0, bytes(src), bytes(dst));
  for (std::size_t i = 0; i < total; ++i) {
    const std::size_t b = i / block, j = i % block;
    const float want =
        b == static_cast<std::size_t>(rank) ? src[j] + src[block + j] + src[2 * block + j] + src[3 * block + j] : 0.0f;
    ASSERT_EQ(dst[i], want) << i;
  }
}

TEST(TrafficFloor, Bf16ReductionRoundsOnce) {
  // Three ranks' values 1, 2^-8, 2^-9: summed in fp32 and rounded once the result differs from
  // rounding after each addition, so a loop that accumulated in bf16 would fail here.
  const std::size_t block = 1;
  std::vector<bf16> src = {bf16::from_float(1.0f), bf16::from_float(0.00390625f),  // 2^-8
                           bf16::from_float(0.001953125f)};                        // 2^-9
  std::vector<bf16> dst(block);
  run_traffic_floor(CollOp::reduce_scatter, DType::bf16, 3, 3, 0, 0, reinterpret_cast<const std::byte*>(src.data()),
                    reinterpret_cast<std::byte*>(dst.data()));
  // Once: 1 + 2^-8 + 2^-9 = 1.005859375 -> nearest bf16 (step 2^-7 = 0.0078125) is 1.0078125.
  // Twice: (1 + 2^-8) is a tie -> 1 (even), then 1 + 2^-9 -> 1.
  EXPECT_EQ(static_cast<float>(dst[0]), 1.0078125f);
}

TEST(TrafficFloor, RefusesWhatItCannotTime) {
  std::vector<float> a(8), b(8);
  EXPECT_THROW(run_traffic_floor(CollOp::reduce_scatter, DType::f64, 8, 2, 0, 0, bytes(a), bytes(b)),
               PreconditionError);
  EXPECT_THROW(run_traffic_floor(CollOp::all_gather, DType::f32, 8, 2, 2, 0, bytes(a), bytes(b)), Error);
}

}  // namespace
}  // namespace hzp::harness
