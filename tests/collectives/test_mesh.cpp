// RankMesh (serial): coordinates and groups against hand-written expectations, node groups, the
// hierarchical-sharding group sets, parsing, and errors naming every number.
#include <gtest/gtest.h>

#include <string>

#include "config_error_test_util.hpp"
#include "hzp/collectives/mesh.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll {
namespace {

using Ranks = std::vector<int>;

using test::expect_config_error;

RankMesh mesh_8x2(std::string spec = "replica=2,shard=4") {
  return RankMesh(Topology::virtual_nodes(8, 2), parse_mesh_axes(spec));
}

TEST(RankMesh, ReplicaTimesShardOnFourVirtualNodes) {
  const RankMesh m = mesh_8x2();
  EXPECT_EQ(m.ndim(), 2);
  EXPECT_EQ(m.axis_size("replica"), 2);
  EXPECT_EQ(m.axis_size("shard"), 4);
  EXPECT_EQ(m.groups("shard"), (RankGroups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(m.groups("replica"), (RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.intra_node_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.inter_node_groups(), (RankGroups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.group("shard", 6), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(m.group("replica", 6), (Ranks{2, 6}));
  EXPECT_EQ(m.intra_node_group(5), (Ranks{4, 5}));
  EXPECT_EQ(m.inter_node_group(5), (Ranks{1, 3, 5, 7}));
  EXPECT_EQ(m.coord(6), (Ranks{1, 2}));
  const int c[] = {1, 2};
  EXPECT_EQ(m.rank_of(c), 6);
  // Colour and key of a split: the group's index in groups() and the position inside it.
  EXPECT_EQ(m.group_index("shard", 6), 1);
  EXPECT_EQ(m.position("shard", 6), 2);
  EXPECT_EQ(m.group_index("replica", 6), 2);
  EXPECT_EQ(m.position("replica", 6), 1);
  EXPECT_FALSE(m.within_node("shard"));   // 4 ranks over nodes of 2
  EXPECT_FALSE(m.within_node("replica"));
}

TEST(RankMesh, EveryRankAgreesWithGroupsListing) {
  const RankMesh m(Topology::virtual_nodes(24, 4), parse_mesh_axes("pp=2,dp=3,tp=4"));
  for (const char* axis : {"pp", "dp", "tp"}) {
    const auto gs = m.groups(axis);
    ASSERT_EQ(static_cast<int>(gs.size()), m.num_groups(axis));
    for (int g = 0; g < static_cast<int>(gs.size()); ++g)
      for (int p = 0; p < static_cast<int>(gs[g].size()); ++p) {
        const int r = gs[g][p];
        EXPECT_EQ(m.group_index(axis, r), g) << axis << " rank " << r;
        EXPECT_EQ(m.position(axis, r), p) << axis << " rank " << r;
        EXPECT_EQ(m.group(axis, r), gs[g]);
      }
  }
  EXPECT_EQ(m.groups("dp")[0], (Ranks{0, 4, 8}));
  EXPECT_EQ(m.groups("pp")[5], (Ranks{5, 17}));
  EXPECT_TRUE(m.within_node("tp"));
}

TEST(RankMesh, GroupOverSeveralAxes) {
  const RankMesh m(Topology::virtual_nodes(8, 2), parse_mesh_axes("dp=2,cp=2,tp=2"));
  const std::string_view dp_cp[] = {"dp", "cp"};
  EXPECT_EQ(m.groups(dp_cp), (RankGroups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.group(dp_cp, 3), (Ranks{1, 3, 5, 7}));
  const std::string_view cp_tp[] = {"tp", "cp"};  // order of names does not matter
  EXPECT_EQ(m.groups(cp_tp), (RankGroups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(RankMesh, ShardedIsReplicaTimesShard) {
  const RankMesh m = RankMesh::sharded(Topology::virtual_nodes(8, 4), 4);
  EXPECT_EQ(format_mesh_axes(m.axes()), "replica=2,shard=4");
  EXPECT_EQ(m.groups("shard"), contiguous_groups(8, 4));
  EXPECT_EQ(m.groups("replica"), strided_groups(8, 4));
  EXPECT_TRUE(m.within_node("shard"));
  EXPECT_EQ(contiguous_groups(6, 2), (RankGroups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(strided_groups(6, 2), (RankGroups{{0, 2, 4}, {1, 3, 5}}));
  expect_config_error([] { contiguous_groups(8, 3); }, {"group size 3", "world size 8"});
  expect_config_error([] { strided_groups(8, 0); }, {"group size 0", "world size 8"});
  expect_config_error([] { RankMesh::sharded(Topology::virtual_nodes(8, 2), 5); }, {"5", "world size 8"});
}

TEST(RankMesh, InferredAxisAndSingleAxis) {
  const RankMesh m = mesh_8x2("replica=-1,shard=2");
  EXPECT_EQ(m.axis_size("replica"), 4);
  EXPECT_TRUE(m.within_node("shard"));
  const RankMesh flat = mesh_8x2("dp=8");
  EXPECT_EQ(flat.groups("dp"), (RankGroups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(flat.group_index("dp", 7), 0);
}

TEST(RankMesh, ParseAndFormat) {
  const auto axes = parse_mesh_axes(" replica = 2 , tp=2@node ");
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_EQ(axes[0].name, "replica");
  EXPECT_EQ(axes[0].size, 2);
  EXPECT_FALSE(axes[0].within_node);
  EXPECT_TRUE(axes[1].within_node);
  EXPECT_EQ(format_mesh_axes(axes), "replica=2,tp=2@node");
  expect_config_error([] { parse_mesh_axes("replica2"); }, {"'replica2' is not name=size"});
  expect_config_error([] { parse_mesh_axes("a=x"); }, {"size 'x' of axis 'a'"});
  expect_config_error([] { parse_mesh_axes("a=2,"); }, {"is not name=size"});
}

TEST(RankMesh, BadSizesNameEveryNumber) {
  expect_config_error([] { mesh_8x2("replica=2,shard=3"); },
                      {"replica=2,shard=3", "2 x 3 = 6 ranks", "the world has 8"});
  expect_config_error([] { mesh_8x2("replica=0,shard=8"); }, {"axis 'replica' has size 0", "world size 8"});
  expect_config_error([] { mesh_8x2("a=-1,b=-1"); }, {"only one axis size may be -1", "'a'", "'b'"});
  expect_config_error([] { mesh_8x2("a=-1,b=3"); }, {"cannot infer axis 'a'", "world size 8", "multiple of 3"});
  expect_config_error([] { mesh_8x2("a=2,a=4"); }, {"axis 'a' appears twice"});
  expect_config_error([] { RankMesh(Topology::virtual_nodes(4, 2), {}); }, {"at least one axis", "world size 4"});
  expect_config_error([] { mesh_8x2().axis_index("tp"); }, {"no axis 'tp'", "replica, shard"});
}

TEST(RankMesh, GroupThatShouldStayInANodeButDoesNot) {
  // Explicit demand: tp of size 4 over nodes of 2.
  expect_config_error([] { mesh_8x2("dp=2,tp=4@node"); },
                      {"axis 'tp' (size 4, stride 1) should stay inside a node", "{0, 1, 2, 3}",
                       "ranks 0 and 2 are on nodes 0 and 1", "8 ranks on 4 nodes x 2 ranks"});
  // Explicit demand on an outer axis: tp (stride 2) inside nodes of 4 is fine, of 2 is not.
  EXPECT_NO_THROW(RankMesh(Topology::virtual_nodes(8, 4), parse_mesh_axes("dp=2,tp=2@node,cp=2")));
  expect_config_error([] { mesh_8x2("dp=2,tp=2@node,cp=2"); }, {"axis 'tp' (size 2, stride 2)", "{0, 2}"});
  // Implicit demand on the innermost axis (its size divides ranks per node) under round-robin
  // placement: ranks 0,2,4,6 on one host, 1,3,5,7 on the other.
  const int keys[] = {0, 1, 0, 1, 0, 1, 0, 1};
  const Topology rr = Topology::from_node_map(keys, 0, TopologySource::machine);
  expect_config_error([&] { RankMesh(rr, parse_mesh_axes("replica=4,shard=2")); },
                      {"axis 'shard' (size 2, stride 1)", "{0, 1}", "ranks are not placed node by node"});
  // ...while a shard axis spanning whole nodes makes no such demand.
  EXPECT_NO_THROW(RankMesh(rr, parse_mesh_axes("replica=1,shard=8")));
}

TEST(RankMesh, DescribeListsGroups) {
  const std::string d = mesh_8x2().describe();
  for (const char* piece :
       {"8 ranks on 4 nodes x 2 ranks", "mesh: replica=2,shard=4", "axis shard: size 4, stride 1, 2 groups",
        "{0, 1, 2, 3} {4, 5, 6, 7}", "axis replica: size 2, stride 4, 4 groups", "{0, 4} {1, 5} {2, 6} {3, 7}",
        "intra-node: 4 groups", "{0, 1} {2, 3} {4, 5} {6, 7}", "{0, 2, 4, 6} {1, 3, 5, 7}"})
    EXPECT_NE(d.find(piece), std::string::npos) << "missing '" << piece << "' in:\n" << d;
}

}  // namespace
}  // namespace hzp::coll
