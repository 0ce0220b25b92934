// Process groups from one description (step/process_groups.hpp), under mpiexec at 2, 4 and 8 ranks: for
// a sample of parallel degrees at each world size, every communicator's members (gathered through the
// communicator itself) are the ranks a closed form of the nesting pp > dp_replicate > dp_shard > cp > tp
// names, written here by brute force over mixed-radix coordinates; and the refusals name every value.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {

using coll::Topology;
using schedulers::ParallelDims;
using schedulers::ProcessGroups;

// Coordinates of rank r, innermost (tp) first: tp, cp, dp_shard, dp_replicate, pp.
std::vector<int> coords(const ParallelDims& d, int r) {
  const int sizes[] = {d.tp, d.cp, d.dp_shard, d.dp_replicate, d.pp};
  std::vector<int> c;
  for (int s : sizes) {
    c.push_back(r % s);
    r /= s;
  }
  return c;
}

// The ranks agreeing with r on every coordinate not in `free` (indices into coords()), in rank order.
std::vector<int> closed_form(const ParallelDims& d, int w, int r, std::vector<int> free) {
  std::vector<int> out;
  const std::vector<int> mine = coords(d, r);
  for (int q = 0; q < w; ++q) {
    const std::vector<int> c = coords(d, q);
    bool same = true;
    for (int i = 0; i < 5; ++i)
      if (std::find(free.begin(), free.end(), i) == free.end() && c[static_cast<std::size_t>(i)] != mine[static_cast<std::size_t>(i)])
        same = false;
    if (same) out.push_back(q);
  }
  return out;
}

std::vector<int> members(coll::Communicator& comm) {
  std::int32_t mine = world_rank();
  std::vector<std::int32_t> all(static_cast<std::size_t>(comm.size()), -1);
  comm.all_gather(ConstTensorView(&mine, Shape{1}, DType::i32), TensorView(all.data(), Shape{comm.size()}, DType::i32),
                  StreamRef::host());
  return {all.begin(), all.end()};
}

ParallelDims dims(int pp, int rep, int shard, int cp, int tp, int ep = 1) {
  ParallelDims d;
  d.pp = pp;
  d.dp_replicate = rep;
  d.dp_shard = shard;
  d.cp = cp;
  d.tp = tp;
  d.ep = ep;
  return d;
}

TEST(ProcessGroups, EveryCommunicatorHoldsTheClosedFormsRanks) {
  const int w = world_size(), r = world_rank();
  std::vector<ParallelDims> sample;
  if (w == 2) sample = {dims(1, 2, 1, 1, 1), dims(1, 1, 1, 1, 2), dims(2, 1, 1, 1, 1), dims(1, 1, 1, 2, 1, 2)};
  if (w == 4)
    sample = {dims(2, 1, 1, 1, 2), dims(1, 1, 2, 2, 1, 4), dims(1, 2, 2, 1, 1, 2), dims(1, 1, 1, 1, 4)};
  if (w == 8)
    sample = {dims(2, 1, 2, 1, 2, 2), dims(1, 2, 2, 2, 1, 4), dims(2, 1, 1, 2, 2), dims(1, 1, 8, 1, 1, 2)};
  ASSERT_FALSE(sample.empty()) << "runs at 2, 4 or 8 ranks";
  auto world = coll::make_mpi_world(Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  for (const ParallelDims& d : sample) {
    const std::string label = d.describe();
    const ProcessGroups g(*world, d, Topology::virtual_nodes(w, w, r));
    EXPECT_EQ(members(g.data_parallel()), closed_form(d, w, r, {2, 3})) << label;
    EXPECT_EQ(members(g.data_context()), closed_form(d, w, r, {1, 2, 3})) << label;
    // A group that is the whole world is the world itself; one of one rank is not made.
    EXPECT_EQ(&g.data_parallel() == world.get(), d.dp() == w) << label;
    const std::pair<coll::Communicator*, int> singles[] = {{g.tensor(), 0}, {g.context(), 1}, {g.pipeline(), 4}};
    const int degree[] = {d.tp, d.cp, d.pp};
    for (int i = 0; i < 3; ++i) {
      const auto [comm, axis] = singles[i];
      if (degree[i] == 1) {
        EXPECT_EQ(comm, nullptr) << label << " axis " << axis;
      } else {
        ASSERT_NE(comm, nullptr) << label << " axis " << axis;
        EXPECT_EQ(members(*comm), closed_form(d, w, r, {axis})) << label << " axis " << axis;
      }
    }
    if (d.ep > 1) {
      // ep consecutive members of the data × context group.
      const std::vector<int> dc = closed_form(d, w, r, {1, 2, 3});
      const auto at = static_cast<int>(std::find(dc.begin(), dc.end(), r) - dc.begin());
      const std::vector<int> want(dc.begin() + at / d.ep * d.ep, dc.begin() + (at / d.ep + 1) * d.ep);
      ASSERT_NE(g.expert(), nullptr) << label;
      EXPECT_EQ(members(*g.expert()), want) << label;
    } else {
      EXPECT_EQ(g.expert(), nullptr) << label;
    }
    // A further split along the mesh: the shard groups, in position order.
    auto shard = g.split({schedulers::kAxisShard}, "shard");
    ASSERT_NE(shard, nullptr);
    EXPECT_EQ(shard->name(), "shard");
    EXPECT_EQ(members(*shard), closed_form(d, w, r, {2})) << label;
  }
}

TEST(ProcessGroups, RefusalsNameEveryValue) {
  // Pure: no communicator is made, every rank checks the same thing.
  EXPECT_TRUE(throws_with<ConfigError>([] { dims(1, 1, 1, 1, 3).validate(Topology::virtual_nodes(4, 4)); },
                                       {"tp=3", "= 3, not the world size W = 4", "fix:"}));
  EXPECT_TRUE(throws_with<ConfigError>([] { dims(1, 1, 0, 1, 4).validate(Topology::virtual_nodes(4, 4)); },
                                       {"dp_shard = 0 must be >= 1"}));
  // tp = 4 on nodes of 2 ranks: refused unless allowed.
  EXPECT_TRUE(throws_with<ConfigError>([] { dims(2, 1, 1, 1, 4).validate(Topology::virtual_nodes(8, 2)); },
                                       {"tp = 4", "ranks 0..3 spans nodes 0 and 1", "tp_across_nodes"}));
  ParallelDims across = dims(2, 1, 1, 1, 4);
  across.tp_across_nodes = true;
  EXPECT_NO_THROW(across.validate(Topology::virtual_nodes(8, 2)));
  EXPECT_TRUE(throws_with<ConfigError>([] { dims(1, 1, 2, 1, 2, 4).validate(Topology::virtual_nodes(4, 4)); },
                                       {"ep = 4 does not divide dp_replicate · dp_shard · cp = 2"}));
  // Two problems, one message.
  EXPECT_TRUE(throws_with<ConfigError>([] { dims(1, 1, 1, 1, 6, 5).validate(Topology::virtual_nodes(8, 4)); },
                                       {"not the world size W = 8", "ep = 5"}));
}

}  // namespace
}  // namespace hzp::test
