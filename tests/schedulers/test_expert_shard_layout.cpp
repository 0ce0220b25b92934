// Serial tests of ExpertShardLayout (common/expert_shard_layout.hpp) on tiny's shape with tiny-moe's experts, cut as
// rank 1 of ep2 × tp2 would hold it: over every pair of slice indices the slices' real elements cover the rank's flat
// model exactly once, expert pieces in the expert part and everything else in the dense part, each part's segment a
// unit's elements of that part; pack then unpack gives the flat buffer back, with the padding zero.
#include <gtest/gtest.h>

#include <vector>

#include "hzp/schedulers/common/expert_shard_layout.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::schedulers {
namespace {

using Part = ExpertShardLayout::Part;

workloads::ParamLayout pieces() {
  workloads::LlamaConfig c = workloads::model_preset("tiny").model;
  c.moe = workloads::model_preset("tiny-moe").model.moe;
  return workloads::llama_expert_parallel_layout(c, 2, 1, 2, 1);
}

bool expert_piece(const workloads::ParamLayout& l, int u, int t) {
  const workloads::ParamTensor& p = l.unit(u).tensors[static_cast<std::size_t>(t)];
  return p.shard.sharded() && p.shard.group == "ep";
}

TEST(ExpertShardLayout, SlicesCoverTheModelOnceByPart) {
  const workloads::ParamLayout layout = pieces();
  const int z = 4, ze = 2;  // data × context, expert-data
  const ExpertShardLayout s(layout, z, ze);
  std::vector<int> seen(static_cast<std::size_t>(layout.total_numel()), 0);
  std::int64_t expert_elements = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (int t = 0; t < static_cast<int>(layout.unit(u).tensors.size()); ++t)
      if (expert_piece(layout, u, t)) expert_elements += layout.unit(u).tensors[static_cast<std::size_t>(t)].numel();
  ASSERT_GT(expert_elements, 0);
  EXPECT_EQ(s.shards(Part::expert).total_numel(), expert_elements);
  EXPECT_EQ(s.shards(Part::dense).total_numel(), layout.total_numel() - expert_elements);
  EXPECT_EQ(s.slice_total(), s.shards(Part::dense).slice_total() + s.shards(Part::expert).slice_total());
  for (int i = 0; i < z; ++i)
    for (int j = 0; j < ze; ++j) {
      std::int64_t prev_end = 0;
      for (const ExpertShardLayout::SliceRun& r : s.slice_runs(i, j)) {
        EXPECT_GE(r.local, prev_end);  // slice order, no overlap
        prev_end = r.local + r.count;
        EXPECT_EQ(expert_piece(layout, r.unit, r.tensor), r.part == Part::expert);
        const std::int64_t t0 = layout.tensor_offset(r.unit, r.tensor);
        EXPECT_GE(r.flat, t0);
        EXPECT_LE(r.flat + r.count, t0 + layout.unit(r.unit).tensors[static_cast<std::size_t>(r.tensor)].numel());
        // Each dense element belongs to slice i alone, each expert element to slice j alone.
        if ((r.part == Part::dense && j == 0) || (r.part == Part::expert && i == 0))
          for (std::int64_t k = 0; k < r.count; ++k) ++seen[static_cast<std::size_t>(r.flat + k)];
      }
      EXPECT_LE(prev_end, s.slice_total());
    }
  for (std::size_t k = 0; k < seen.size(); ++k) ASSERT_EQ(seen[k], 1) << "element " << k;
}

TEST(ExpertShardLayout, PackUnpackRoundTrips) {
  const workloads::ParamLayout layout = pieces();
  const ExpertShardLayout s(layout, 3, 2);  // 3 does not divide the units: padding in every part
  std::vector<float> flat(static_cast<std::size_t>(layout.total_numel()));
  for (std::size_t k = 0; k < flat.size(); ++k) flat[k] = static_cast<float>(k % 977) + 1;
  std::vector<float> back(flat.size(), 0);
  for (const Part p : {Part::dense, Part::expert}) {
    const ShardLayout& l = s.shards(p);
    std::vector<float> padded(static_cast<std::size_t>(l.padded_total()), -1);
    const auto n = static_cast<std::int64_t>(flat.size());
    s.pack(p, ConstTensorView(flat.data(), Shape{n}, DType::f32),
           TensorView(padded.data(), Shape{l.padded_total()}, DType::f32), StreamRef::host());
    for (int u = 0; u < l.num_segments(); ++u)
      for (std::int64_t k = l.numel(u); k < l.padded_numel(u); ++k)
        EXPECT_EQ(padded[static_cast<std::size_t>(l.padded_offset(u) + k)], 0.0f);
    s.unpack(p, ConstTensorView(padded.data(), Shape{l.padded_total()}, DType::f32),
             TensorView(back.data(), Shape{n}, DType::f32), StreamRef::host());
  }
  EXPECT_EQ(back, flat);
}

}  // namespace
}  // namespace hzp::schedulers
