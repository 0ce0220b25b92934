// Phantom worlds (docs/phantom.md): groups built by split_by without peers, the stand-in data of each collective,
// and the bytes per level recorded, against formulas computed here (docs/collectives.md, "Bytes per level").
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/mesh.hpp"
#include "hzp/collectives/mesh_comm.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology.hpp"

namespace hzp::coll {
namespace {

MpiCommConfig ring_only() {
  MpiCommConfig c;
  c.small_message_bytes = 0;  // always the ring: the byte formulas below are the ring's
  return c;
}

TEST(PhantomWorld, SplitByFindsTheMembersOfEveryRanksGroup) {
  // W = 8, nodes of 2; rank 5 in the strided groups {r : r mod 4 = c}, ordered by r / 4 reversed.
  const Topology topo = Topology::virtual_nodes(8, 2, 5);
  auto world = make_phantom_world(topo, ring_only(), 5);
  EXPECT_TRUE(world->phantom());
  EXPECT_EQ(world->rank(), 5);
  EXPECT_EQ(world->size(), 8);
  auto g = world->split_by([](int r) { return GroupSlot{r % 4, -(r / 4)}; }, "strided");
  ASSERT_NE(g, nullptr);
  auto* m = dynamic_cast<MpiCommunicator*>(g.get());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(g->size(), 2);
  EXPECT_EQ(g->rank(), 0);  // key -1 sorts before rank 1's key 0
  EXPECT_EQ(m->world_rank_of(0), 5);
  EXPECT_EQ(m->world_rank_of(1), 1);
  EXPECT_EQ(m->level_to(1), LinkLevel::inter);
  // A split of the split, and a rank left out.
  auto alone = g->split_by([](int r) { return GroupSlot{r, 0}; }, "alone");
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(world->split_by([](int r) { return GroupSlot{r == 5 ? -1 : 0, 0}; }, "none"), nullptr);
  // split() cannot learn the other colours: refused, naming split_by.
  EXPECT_THROW(world->split(0, 0, "x"), Error);
}

TEST(PhantomWorld, MeshGroupsEqualTheMeshs) {
  const Topology topo = Topology::virtual_nodes(8, 2, 6);
  auto world = make_phantom_world(topo, ring_only(), 6);
  const RankMesh mesh(topo, {{"replica", 2}, {"shard", 4}});
  for (const char* axis : {"replica", "shard"}) {
    auto c = split_axis(*world, mesh, axis);
    auto* m = dynamic_cast<MpiCommunicator*>(c.get());
    const std::vector<int> want = mesh.group(axis, 6);
    ASSERT_EQ(c->size(), static_cast<int>(want.size())) << axis;
    EXPECT_EQ(c->rank(), mesh.position(axis, 6)) << axis;
    for (int p = 0; p < c->size(); ++p) EXPECT_EQ(m->world_rank_of(p), want[static_cast<std::size_t>(p)]) << axis;
  }
}

TEST(PhantomWorld, StandInDataAndRingBytes) {
  // Group of 4 over two nodes of 2; rank 3.
  const Topology topo = Topology::virtual_nodes(4, 2, 3);
  auto world = make_phantom_world(topo, ring_only(), 3);
  const std::int64_t n = 1000;
  std::vector<float> in(n), out(4 * n, -1.f);
  std::iota(in.begin(), in.end(), 1.f);
  const auto before = world->counters().snapshot();
  world->all_gather(ConstTensorView(in.data(), Shape{n}, DType::f32), TensorView(out.data(), Shape{4 * n}, DType::f32),
                    StreamRef::host());
  for (int q = 0; q < 4; ++q)
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<std::size_t>(q * n + i)], in[static_cast<std::size_t>(i)]);
  std::vector<float> rs(n);
  world->reduce_scatter(ConstTensorView(out.data(), Shape{4 * n}, DType::f32), TensorView(rs.data(), Shape{n}, DType::f32),
                        ReduceOp::sum, StreamRef::host());
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(rs[static_cast<std::size_t>(i)], 4 * in[static_cast<std::size_t>(i)]);
  std::vector<float> buf(in);
  world->all_reduce(TensorView(buf.data(), Shape{n}, DType::f32), ReduceOp::max, StreamRef::host());
  EXPECT_EQ(buf, in);
  const auto d = world->counters().delta(before);
  // Ring: rank 3 sends to rank 0, on the other node: everything inter-node.
  EXPECT_EQ(d.level(CollOp::all_gather, LinkLevel::inter).bytes, 3u * n * 4);
  EXPECT_EQ(d.level(CollOp::all_gather, LinkLevel::intra).bytes, 0u);
  EXPECT_EQ(d.level(CollOp::reduce_scatter, LinkLevel::inter).bytes, 3u * n * 4);  // fp32: e = e_acc
  for (const CallRecord& r : d.records) {
    EXPECT_TRUE(r.bytes_modelled);
    EXPECT_EQ(r.algorithm, "phantom(model: ring)");
  }
}

TEST(PhantomWorld, AllToAllvReceivesWhatThisRankSendsItself) {
  // Rank 1 of 4 on nodes of 2: every peer is taken to send rank 1 what rank 1 sends itself (docs/phantom.md, "Expert
  // parallelism"), cut to the block's count or padded with zeros; the bytes are what rank 1 sends, level by level.
  const Topology topo = Topology::virtual_nodes(4, 2, 1);
  auto world = make_phantom_world(topo, ring_only(), 1);
  const std::vector<std::int64_t> send{2, 3, 1, 4}, recv{3, 3, 1, 5};
  std::vector<float> in(10), out(12, -1.f);
  std::iota(in.begin(), in.end(), 1.f);  // block 1 (rank 1 to itself) is {3, 4, 5}
  const auto before = world->counters().snapshot();
  world->start_all_to_allv(ConstTensorView(in.data(), Shape{10}, DType::f32), send,
                           TensorView(out.data(), Shape{12}, DType::f32), recv, StreamRef::host())
      .wait();
  const std::vector<float> want{3, 4, 5, 3, 4, 5, 3, 3, 4, 5, 0, 0};
  EXPECT_EQ(out, want);
  const auto d = world->counters().delta(before);
  EXPECT_EQ(d.level(CollOp::all_to_allv, LinkLevel::intra).bytes, 2u * 4);        // to rank 0
  EXPECT_EQ(d.level(CollOp::all_to_allv, LinkLevel::inter).bytes, (1u + 4u) * 4);  // to ranks 2 and 3
}

TEST(PhantomWorld, GatherOfANonPowerOfTwoGroupInPlaceCopiesTheOwnBlockEverywhere) {
  // 5 ranks (the stand-in fills block 0, then doubles: 1, 2, 4, then the last one), rank 3's block given in place.
  const Topology topo = Topology::virtual_nodes(5, 5, 3);
  auto world = make_phantom_world(topo, ring_only(), 3);
  const std::int64_t n = 7;
  std::vector<std::int32_t> out(5 * n, -1);
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(3 * n + i)] = static_cast<std::int32_t>(100 + i);
  world->all_gather(ConstTensorView(out.data() + 3 * n, Shape{n}, DType::i32),
                    TensorView(out.data(), Shape{5 * n}, DType::i32), StreamRef::host());
  for (int q = 0; q < 5; ++q)
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[static_cast<std::size_t>(q * n + i)], 100 + i) << "block " << q << " element " << i;
}

TEST(PhantomWorld, SumsAreTheGroupSizeTimesTheOwnValueRoundedOnceInBf16) {
  // The sum of p equal terms in the buffer's dtype, worked out by hand: bf16 keeps 8 significant bits, so
  // 3 x (1 + 2^-7) = 3.0234375 lies half-way between 3.015625 and 3.03125 and rounds to the even one, 3.03125;
  // 3 x 1.5 = 4.5 is exact. int64 sums are exact.
  const Topology topo = Topology::virtual_nodes(3, 3, 1);
  auto world = make_phantom_world(topo, ring_only(), 1);
  std::vector<bf16> b{bf16(1.0f + 1.0f / 128), bf16(1.5f), bf16(-2.0f)};
  world->all_reduce(TensorView(b.data(), Shape{3}, DType::bf16), ReduceOp::sum, StreamRef::host());
  EXPECT_EQ(b[0].to_float(), 3.03125f);
  EXPECT_EQ(b[1].to_float(), 4.5f);
  EXPECT_EQ(b[2].to_float(), -6.0f);
  std::vector<std::int64_t> in{1, 2, 3, 4, 5, 6}, out(2, 0);  // rank 1's block of a reduce-scatter is {3, 4}
  world->reduce_scatter(ConstTensorView(in.data(), Shape{6}, DType::i64), TensorView(out.data(), Shape{2}, DType::i64),
                        ReduceOp::sum, StreamRef::host());
  EXPECT_EQ(out, (std::vector<std::int64_t>{9, 12}));
  world->reduce_scatter(ConstTensorView(in.data(), Shape{6}, DType::i64), TensorView(out.data(), Shape{2}, DType::i64),
                        ReduceOp::min, StreamRef::host());
  EXPECT_EQ(out, (std::vector<std::int64_t>{3, 4}));
}

}  // namespace
}  // namespace hzp::coll
