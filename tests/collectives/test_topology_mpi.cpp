// Topology under mpiexec (2, 4, 8 ranks): the machine-derived node map of this one-host job, virtual
// nodes applied on top of it, and communicators split along mesh axes and node groups whose members
// are exactly the mesh's groups (members gathered through the new communicator itself).
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "hzp/collectives/mesh.hpp"
#include "hzp/collectives/mesh_comm.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology_mpi.hpp"
#include "mpi_test.hpp"

namespace hzp::coll {
namespace {

using hzp::test::world_rank;
using hzp::test::world_size;

TEST(TopologyMpi, MachineIsOneNode) {
  const Topology t = discover_machine_topology(MPI_COMM_WORLD);
  EXPECT_EQ(t.source(), TopologySource::machine);
  EXPECT_EQ(t.world_size(), world_size());
  EXPECT_EQ(t.rank(), world_rank());
  EXPECT_EQ(t.num_nodes(), 1) << t.describe();
  EXPECT_EQ(t.ranks_per_node(), world_size());
  EXPECT_EQ(t.local_rank(), world_rank());
  ASSERT_EQ(t.node_names().size(), 1u);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(t.node_names()[0], host);
}

TEST(TopologyMpi, VirtualNodesOnTopOfTheMachine) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const Topology t = discover_topology(MPI_COMM_WORLD, 2);
  EXPECT_EQ(t.source(), TopologySource::virtual_nodes);
  EXPECT_EQ(t.num_nodes(), world_size() / 2);
  for (int r = 0; r < world_size(); ++r) EXPECT_EQ(t.node_of(r), r / 2);
  EXPECT_EQ(t.node_names()[0].substr(t.node_names()[0].size() - 3), "/v0");
  // Every rank throws the same error for a size that does not divide W (no rank left waiting).
  EXPECT_THROW(discover_topology(MPI_COMM_WORLD, world_size() + 1), ConfigError);
}

// Gathers the world rank of every member of `comm` through `comm` itself: proves who is in it and
// in which order, independently of what split was asked for.
std::vector<int> members(Communicator& comm) {
  std::int32_t mine = world_rank();
  std::vector<std::int32_t> all(static_cast<std::size_t>(comm.size()), -1);
  comm.all_gather(ConstTensorView(&mine, Shape{1}, DType::i32),
                  TensorView(all.data(), Shape{comm.size()}, DType::i32), StreamRef::host());
  return {all.begin(), all.end()};
}

void expect_split_matches(Communicator& world, const RankMesh& mesh) {
  for (const MeshAxis& axis : mesh.axes()) {
    auto sub = split_axis(world, mesh, axis.name);
    ASSERT_NE(sub, nullptr) << axis.name;
    EXPECT_EQ(sub->name(), axis.name);
    EXPECT_EQ(sub->size(), axis.size) << axis.name;
    EXPECT_EQ(sub->rank(), mesh.position(axis.name, world_rank())) << axis.name;
    EXPECT_EQ(members(*sub), mesh.group(axis.name, world_rank())) << axis.name;
  }
  auto intra = split_intra_node(world, mesh);
  ASSERT_NE(intra, nullptr);
  EXPECT_EQ(members(*intra), mesh.intra_node_group(world_rank()));
  auto inter = split_inter_node(world, mesh);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(members(*inter), mesh.inter_node_group(world_rank()));
}

TEST(TopologyMpi, SplitGivesTheMeshGroups) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const Topology t = discover_topology(MPI_COMM_WORLD, 2);
  auto world = make_mpi_world(t, MpiCommConfig{});
  expect_split_matches(*world, RankMesh(t, parse_mesh_axes("replica=-1,shard=2")));
  if (world_size() >= 4) expect_split_matches(*world, RankMesh(t, parse_mesh_axes("shard=2,replica=-1")));
  if (world_size() == 8) {
    expect_split_matches(*world, RankMesh(t, parse_mesh_axes("pp=2,dp=2,tp=2@node")));
    // Groups that leave some ranks out: those ranks get no communicator.
    const RankGroups some = {{0, 3}, {5, 6, 7}};
    auto sub = split_groups(*world, some, "some");
    const bool listed = world_rank() == 0 || world_rank() == 3 || world_rank() >= 5;
    ASSERT_EQ(sub != nullptr, listed);
    if (sub) {
      EXPECT_EQ(members(*sub), world_rank() < 4 ? some[0] : some[1]);
    }
  }
}

}  // namespace
}  // namespace hzp::coll
