// Serial tests of the data-parallel components that need no communicator: ShardLayout's padding, slice
// ranges (padding-only slices included) and nested refinement; DDP's unit-aligned buckets; and the plan at
// paper scale (9B at W = 256, counted without allocating), against 18N/W-style forms computed here; and
// the sharded optimizer against the whole-model one.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/schedulers/common/bucketed_all_reduce.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::schedulers {
namespace {

TEST(ShardLayout, PadsEachSegmentAndAllowsPaddingOnlySlices) {
  const ShardLayout l({10, 3, 1}, 4);
  EXPECT_EQ(l.padded_numel(0), 12);
  EXPECT_EQ(l.padded_numel(1), 4);
  EXPECT_EQ(l.padded_numel(2), 4);
  EXPECT_EQ(l.slice_numel(0), 3);
  EXPECT_EQ(l.padded_offset(2), 16);
  EXPECT_EQ(l.slice_offset(2), 4);
  EXPECT_EQ(l.global_offset(2), 13);
  EXPECT_EQ(l.total_numel(), 14);
  EXPECT_EQ(l.padded_total(), 20);
  EXPECT_EQ(l.slice_total(), 5);
  EXPECT_EQ(l.padding(), 6);
  EXPECT_EQ(l.valid_range(0, 3).begin, 9);
  EXPECT_EQ(l.valid_range(0, 3).count, 1);
  EXPECT_EQ(l.valid_range(1, 3).count, 0);  // slice 3 of a 3-element segment: padding only
  EXPECT_EQ(l.valid_range(2, 0).count, 1);
  EXPECT_EQ(l.valid_range(2, 1).count, 0);
  std::int64_t real = 0;
  for (int s = 0; s < l.num_segments(); ++s)
    for (int i = 0; i < l.num_slices(); ++i) real += l.valid_range(s, i).count;
  EXPECT_EQ(real, l.total_numel());
  EXPECT_THROW(ShardLayout({4}, 0), PreconditionError);
  EXPECT_THROW(ShardLayout({4}, 4, 6), PreconditionError);
}

// The nesting hierarchical sharding needs (docs/data-parallel.md "Sharding layout"): with the coarsest
// layout padded for the finest count, fine slice j lies inside coarse slice j / factor, for every segment.
TEST(ShardLayout, RefinedSlicesNestInsideCoarseOnes) {
  const ShardLayout z3({37, 5, 64}, 2, /*pad_multiple=*/8);
  const ShardLayout z2 = z3.refine(2);
  const ShardLayout z1 = z2.refine(2);
  EXPECT_EQ(z1.num_slices(), 8);
  for (int s = 0; s < z3.num_segments(); ++s) {
    EXPECT_EQ(z1.padded_numel(s), z3.padded_numel(s));
    for (int j = 0; j < 8; ++j) {
      const std::int64_t b1 = j * z1.slice_numel(s), e1 = b1 + z1.slice_numel(s);
      const int j2 = j / 2, j3 = j / 4;
      const std::int64_t b2 = j2 * z2.slice_numel(s), e2 = b2 + z2.slice_numel(s);
      const std::int64_t b3 = j3 * z3.slice_numel(s), e3 = b3 + z3.slice_numel(s);
      EXPECT_TRUE(b2 <= b1 && e1 <= e2) << s << " " << j;
      EXPECT_TRUE(b3 <= b2 && e2 <= e3) << s << " " << j;
    }
  }
  EXPECT_THROW(ShardLayout({5}, 2).refine(2), PreconditionError);
}

// A checkpoint's view of a slice (flat_runs): a full padded buffer whose real elements hold their flat, unpadded
// index and whose padding holds −1, cut into slice buffers as the schedulers cut it (slice i of every segment end to
// end); each run's elements in slice i's buffer are its flat indexes, and over all slices the runs cover every index
// once. Segments of 0 elements, padding-only slices and refined layouts included.
TEST(ShardLayout, FlatRunsNameEachSlicesRealElementsByTheirFlatIndex) {
  const ShardLayout coarse({0, 7, 13, 1, 40}, 3, /*pad_multiple=*/12);
  for (const ShardLayout& l : {ShardLayout({10, 3, 1}, 4), coarse, coarse.refine(2), coarse.refine(4),
                               ShardLayout({61}, 1)}) {
    std::vector<std::int64_t> full(static_cast<std::size_t>(l.padded_total()), -1);
    for (int s = 0; s < l.num_segments(); ++s)
      for (std::int64_t e = 0; e < l.numel(s); ++e)
        full[static_cast<std::size_t>(l.padded_offset(s) + e)] = l.global_offset(s) + e;
    std::vector<int> seen(static_cast<std::size_t>(l.total_numel()), 0);
    for (int i = 0; i < l.num_slices(); ++i) {
      std::vector<std::int64_t> slice;  // slice i of every segment, end to end
      for (int s = 0; s < l.num_segments(); ++s)
        for (std::int64_t e = 0; e < l.slice_numel(s); ++e)
          slice.push_back(full[static_cast<std::size_t>(l.padded_offset(s) + i * l.slice_numel(s) + e)]);
      ASSERT_EQ(static_cast<std::int64_t>(slice.size()), l.slice_total());
      for (const ShardLayout::FlatSliceRun& r : l.flat_runs(i))
        for (std::int64_t k = 0; k < r.count; ++k) {
          EXPECT_EQ(slice[static_cast<std::size_t>(r.local + k)], r.global + k) << "slice " << i;
          ++seen[static_cast<std::size_t>(r.global + k)];
        }
    }
    for (std::size_t g = 0; g < seen.size(); ++g) EXPECT_EQ(seen[g], 1) << "flat index " << g;
  }
}

TEST(BucketedAllReduce, BucketsAreWholeUnitsFromTheBackCoveringEverything) {
  const auto layout = workloads::llama_layout(workloads::model_preset("tiny").model);
  for (std::size_t bytes : {std::size_t{1}, std::size_t{50000}, std::size_t{1} << 30}) {
    const auto b = BucketedAllReduce::make_buckets(layout, bytes, 4);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.front().last_unit, layout.num_units() - 1);
    EXPECT_EQ(b.back().first_unit, 0);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      total += b[i].numel;
      EXPECT_EQ(b[i].offset, layout.unit_offset(b[i].first_unit));
      if (i + 1 < b.size()) {
        EXPECT_EQ(b[i + 1].last_unit, b[i].first_unit - 1);
        EXPECT_GE(std::size_t(b[i].numel) * 4, bytes);
      }
    }
    EXPECT_EQ(total, layout.total_numel());
  }
  EXPECT_EQ(BucketedAllReduce::make_buckets(layout, 1, 4).size(), std::size_t(layout.num_units()));
}

// Paper scale, nothing allocated: the plan's state bytes are the 18N/W forms within the padding bound
// (< one element per unit per slice buffer, < Z per unit in a full buffer), and the collectives of zero3
// are 2 all-gathers + 1 reduce-scatter per unit per micro-batch.
TEST(SchedulerPlan, NineBillionAtW256MatchesTheForms) {
  const auto& preset = workloads::model_preset("9b");
  const auto layout = workloads::llama_layout(preset.model);
  PlanInputs in;
  in.layout = &layout;
  in.train = preset.train;  // bf16-mixed, 512 micro-batches of 1
  in.world_size = 256;
  in.ranks_per_node = 8;
  const double n = double(layout.total_numel());
  const double units = layout.num_units();
  auto total = [&](const char* name, int z) {
    in.options.group_size = z;
    return double(plan_scheduler(name, in).state_total());
  };
  EXPECT_NEAR(total("ddp", 0), 18 * n, 0);
  EXPECT_NEAR(total("zero1", 0), 6 * n + 12 * n / 256, 2 * units * 255 + 12 * units);
  EXPECT_NEAR(total("zero2", 0), 2 * n + 16 * n / 256, 2 * units * 255 + 16 * units);
  EXPECT_NEAR(total("zero3", 0), 18 * n / 256, 18 * units);
  EXPECT_NEAR(total("hsdp", 8), 18 * n / 8, 18 * units);
  in.options.group_size = 0;
  const SchedulerPlan z3 = plan_scheduler("zero3", in);
  const std::int64_t m = 512 / 256;
  for (const PlannedCollective& c : z3.collectives) {
    if (c.op == coll::CollOp::all_gather) {
      EXPECT_EQ(c.calls, 2 * m * layout.num_units());
    }
    if (c.op == coll::CollOp::reduce_scatter) {
      EXPECT_EQ(c.calls, m * layout.num_units());
    }
  }
  in.options.group_size = 8;
  const SchedulerPlan hs = plan_scheduler("hsdp", in);
  for (const PlannedCollective& c : hs.collectives) {
    if (c.group == "shard") {
      EXPECT_EQ(c.bytes[1], 0u) << coll::coll_op_name(c.op) << " crosses nodes";
    }
  }
  in.options.group_size = 3;
  EXPECT_THROW(plan_scheduler("hsdp", in), ConfigError);
}

// The optimizer over slices of a padded layout updates every real element to the bits the whole-model
// optimizer gives it (AdamW is element-wise), with the clip norm combined from the slices' sums of squares,
// and padding stays exactly zero; in bf16-mixed the working pieces are the rounded masters.
TEST(ShardedOptimizer, SlicesUpdateLikeTheWholeModelAndPaddingStaysZero) {
  for (auto precision : {workloads::Precision::fp32, workloads::Precision::bf16_mixed}) {
    workloads::TrainConfig train;
    train.precision = precision;
    train.clip = 0.5;  // makes the norm, hence the combination of slices' sums, matter
    const ShardLayout sl({37, 5, 64}, 4);
    const std::int64_t n = sl.total_numel();
    std::vector<float> init(static_cast<std::size_t>(n)), grad(init.size());
    for (std::int64_t i = 0; i < n; ++i) {
      init[i] = 0.01f * float((i * 7919) % 101 - 50);
      grad[i] = 0.003f * float((i * 104729) % 97 - 48);
    }
    HostBacking backing;
    CachingAllocator alloc(backing);
    const DType pdt = workloads::param_dtype(precision);
    const std::size_t pe = dtype_size(pdt);
    // Reference: one slice holding the whole model.
    std::vector<std::byte> whole(static_cast<std::size_t>(n) * pe);
    ShardedOptimizer ref(train, {TensorView(whole.data(), Shape{n}, pdt)}, alloc,
                         [&](std::span<float> m) { std::copy(init.begin(), init.end(), m.begin()); });
    const ConstTensorView g(grad.data(), Shape{n}, DType::f32);
    const double sq_all = ref.global_sum_squares(g, nullptr);
    ref.step(g, sq_all, 0, 1e-2);
    // Four slices of the padded layout; the global sum of squares is their sum.
    std::vector<std::vector<std::byte>> shard(4, std::vector<std::byte>(static_cast<std::size_t>(sl.slice_total()) * pe));
    std::vector<std::vector<float>> sg(4, std::vector<float>(static_cast<std::size_t>(sl.slice_total()), 0.f));
    std::vector<std::unique_ptr<ShardedOptimizer>> opt;
    double sq = 0;
    for (int r = 0; r < 4; ++r) {
      for (int s = 0; s < sl.num_segments(); ++s) {
        const auto v = sl.valid_range(s, r);
        for (std::int64_t k = 0; k < v.count; ++k)
          sg[r][sl.slice_offset(s) + k] = grad[sl.global_offset(s) + v.begin + k];
      }
      opt.push_back(std::make_unique<ShardedOptimizer>(
          train, std::vector<TensorView>{TensorView(shard[r].data(), Shape{sl.slice_total()}, pdt)}, alloc,
          [&](std::span<float> m) {
            for (int s = 0; s < sl.num_segments(); ++s) {
              const auto v = sl.valid_range(s, r);
              for (std::int64_t k = 0; k < v.count; ++k) m[sl.slice_offset(s) + k] = init[sl.global_offset(s) + v.begin + k];
            }
          }));
      sq += opt[r]->global_sum_squares(ConstTensorView(sg[r].data(), Shape{sl.slice_total()}, DType::f32), nullptr);
    }
    EXPECT_NEAR(sq, sq_all, 1e-12 * sq_all);
    for (int r = 0; r < 4; ++r) {
      const auto res = opt[r]->step(ConstTensorView(sg[r].data(), Shape{sl.slice_total()}, DType::f32), sq_all, 0, 1e-2);
      EXPECT_LT(res.clip_coefficient, 1.0);
      for (int s = 0; s < sl.num_segments(); ++s) {
        const auto v = sl.valid_range(s, r);
        const std::byte* got = shard[r].data() + static_cast<std::size_t>(sl.slice_offset(s)) * pe;
        EXPECT_EQ(0, std::memcmp(got, whole.data() + static_cast<std::size_t>(sl.global_offset(s) + v.begin) * pe,
                                 static_cast<std::size_t>(v.count) * pe)) << "segment " << s << " slice " << r;
        for (std::int64_t k = v.count; k < sl.slice_numel(s); ++k)
          for (std::size_t b = 0; b < pe; ++b) EXPECT_EQ(got[k * pe + b], std::byte{0}) << "padding " << s << " " << k;
      }
    }
  }
}

}  // namespace
}  // namespace hzp::schedulers
