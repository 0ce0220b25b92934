// Topology (serial): virtual nodes, explicit node maps (non-contiguous, unequal), Slurm's variables,
// ranks_per_node applied on top of a machine, and the errors naming every number.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config_error_test_util.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll {
namespace {

using Ranks = std::vector<int>;

using test::expect_config_error;

TEST(Topology, VirtualNodesEightByTwo) {
  const Topology t = Topology::virtual_nodes(8, 2, 5);
  EXPECT_EQ(t.world_size(), 8);
  EXPECT_EQ(t.rank(), 5);
  EXPECT_EQ(t.num_nodes(), 4);
  EXPECT_EQ(t.ranks_per_node(), 2);
  EXPECT_TRUE(t.uniform());
  EXPECT_TRUE(t.contiguous());
  EXPECT_EQ(t.source(), TopologySource::virtual_nodes);
  const int expect_node[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(t.node_of(r), expect_node[r]) << r;
    EXPECT_EQ(t.local_rank(r), r % 2) << r;
  }
  EXPECT_EQ(t.node(), 2);
  EXPECT_EQ(t.local_rank(), 1);
  EXPECT_EQ(t.ranks_on_node(3), (Ranks{6, 7}));
  EXPECT_EQ(t.link_level(0, 1), LinkLevel::intra);
  EXPECT_EQ(t.link_level(1, 2), LinkLevel::inter);
  EXPECT_EQ(t.summary(), "8 ranks on 4 nodes x 2 ranks (virtual_nodes)");
  EXPECT_NE(t.describe().find("node 1: ranks {2, 3}"), std::string::npos) << t.describe();
}

TEST(Topology, OneNodeAndOneRankPerNode) {
  const Topology one = Topology::virtual_nodes(4, 4);
  EXPECT_EQ(one.num_nodes(), 1);
  EXPECT_EQ(one.ranks_on_node(0), (Ranks{0, 1, 2, 3}));
  const Topology each = Topology::virtual_nodes(3, 1);
  EXPECT_EQ(each.num_nodes(), 3);
  EXPECT_EQ(each.local_rank(2), 0);
  EXPECT_EQ(Topology::virtual_nodes(1, 1).summary(), "1 rank on 1 node x 1 ranks (virtual_nodes)");
}

TEST(Topology, VirtualNodesRejectBadSizes) {
  expect_config_error([] { Topology::virtual_nodes(8, 3); },
                      {"topology.ranks_per_node = 3", "does not divide the world size 8", "8 = 2 x 3 + 2"});
  expect_config_error([] { Topology::virtual_nodes(8, 0); }, {"topology.ranks_per_node = 0", "at least 1"});
  expect_config_error([] { Topology::virtual_nodes(0, 1); }, {"topology.world_size = 0"});
  expect_config_error([] { Topology::virtual_nodes(4, 2, 4); }, {"rank 4", "world of 4 ranks"});
}

TEST(Topology, NodeMapRenumbersInOrderOfFirstRank) {
  // Round-robin placement over two hosts (keys 17 and 3), the way `mpiexec -ppn 1` cycles.
  const int keys[] = {17, 3, 17, 3, 17, 3};
  const Topology t = Topology::from_node_map(keys, 1);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.ranks_on_node(0), (Ranks{0, 2, 4}));
  EXPECT_EQ(t.ranks_on_node(1), (Ranks{1, 3, 5}));
  EXPECT_EQ(t.local_rank(4), 2);
  EXPECT_TRUE(t.uniform());
  EXPECT_FALSE(t.contiguous());
  EXPECT_EQ(t.ranks_per_node(), 3);
}

TEST(Topology, UnequalNodesHaveNoRanksPerNode) {
  const int keys[] = {0, 0, 0, 1};
  const Topology t = Topology::from_node_map(keys, 0);
  EXPECT_FALSE(t.uniform());
  EXPECT_TRUE(t.contiguous());
  expect_config_error([&] { (void)t.ranks_per_node(); }, {"different numbers of ranks", "3, 1", "world of 4"});
  EXPECT_EQ(t.summary(), "4 ranks on 2 nodes of unequal sizes (explicit_map)");
}

TEST(Topology, RanksPerNodeOnTopOfMachine) {
  const int keys[] = {0, 0, 0, 0, 1, 1, 1, 1};
  Topology machine = Topology::from_node_map(keys, 6, TopologySource::machine);
  machine.set_node_names({"hostA", "hostB"});
  const Topology same = Topology::with_ranks_per_node(machine, 0);
  EXPECT_EQ(same.num_nodes(), 2);
  EXPECT_EQ(same.source(), TopologySource::machine);
  const Topology v = Topology::with_ranks_per_node(machine, 2);
  EXPECT_EQ(v.num_nodes(), 4);
  EXPECT_EQ(v.rank(), 6);
  EXPECT_EQ(v.node(), 3);
  EXPECT_EQ(v.node_names(), (std::vector<std::string>{"hostA/v0", "hostA/v1", "hostB/v2", "hostB/v3"}));
  // A virtual node of 8 would straddle hostA and hostB; 3 does not divide 8 at all.
  expect_config_error([&] { Topology::with_ranks_per_node(machine, 8); },
                      {"topology.ranks_per_node = 8", "virtual node 0", "{0, 1, 2, 3, 4, 5, 6, 7}",
                       "machine nodes 0 and 1", "2 nodes for 8 ranks"});
  expect_config_error([&] { Topology::with_ranks_per_node(machine, 3); }, {"does not divide the world size 8"});
}

TEST(Topology, SlurmEnvironment) {
  static std::map<std::string, std::string> env;
  auto lookup = [](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env.clear();
  EXPECT_FALSE(Topology::from_slurm_env(lookup).has_value());

  env = {{"SLURM_NTASKS", "8"}, {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_PROCID", "5"}};
  auto t = Topology::from_slurm_env(lookup);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->num_nodes(), 2);
  EXPECT_EQ(t->rank(), 5);
  EXPECT_EQ(t->node(), 1);
  EXPECT_EQ(t->source(), TopologySource::slurm);

  env = {{"SLURM_NPROCS", "6"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}};
  t = Topology::from_slurm_env(lookup);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->num_nodes(), 3);
  EXPECT_EQ(t->ranks_per_node(), 2);

  env = {{"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", "4,3"}};
  expect_config_error([&] { Topology::from_slurm_env(lookup); }, {"SLURM_TASKS_PER_NODE = '4,3'"});
  env = {{"SLURM_NTASKS", "7"}, {"SLURM_NTASKS_PER_NODE", "2"}};
  expect_config_error([&] { Topology::from_slurm_env(lookup); }, {"7 tasks at 2 per node"});
}

TEST(Topology, FormatRanks) {
  const int r[] = {0, 4};
  EXPECT_EQ(format_ranks(r), "{0, 4}");
  EXPECT_EQ(format_ranks(std::span<const int>{}), "{}");
}

}  // namespace
}  // namespace hzp::coll
