// Mesh groups -> communicators through Communicator::split. Checks that the caller's view of the
// mesh matches the communicator it splits, because a mismatch would otherwise surface as a hang.
#include "hzp/collectives/mesh_comm.hpp"

#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::coll {

std::unique_ptr<Communicator> split_groups(Communicator& parent, const RankGroups& groups,
                                           std::string name, bool share_counters) {
  const int size = parent.size();
  std::vector<int> seen(static_cast<std::size_t>(size), -1);
  std::vector<GroupSlot> slots(static_cast<std::size_t>(size), GroupSlot{-1, 0});
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t p = 0; p < groups[g].size(); ++p) {
      const int r = groups[g][p];
      HZP_CHECK(r >= 0 && r < size, "split '", name, "': group ", g, " = ", format_ranks(groups[g]),
                " names rank ", r, " outside the parent '", parent.name(), "' of ", size, " ranks");
      HZP_CHECK(seen[r] < 0, "split '", name, "': rank ", r, " is in group ", seen[r], " and in group ", g);
      seen[r] = static_cast<int>(g);
      slots[static_cast<std::size_t>(r)] = {static_cast<int>(g), static_cast<int>(p)};
    }
  }
  // Every rank's slot is known here, so a phantom parent can build the group too (docs/phantom.md).
  return parent.split_by([slots = std::move(slots)](int r) { return slots[static_cast<std::size_t>(r)]; },
                         std::move(name), share_counters);
}

namespace {
void check_world(const Communicator& world, const RankMesh& mesh) {
  HZP_CHECK(world.size() == mesh.world_size(), "communicator '", world.name(), "' has ", world.size(),
            " ranks but the mesh ", format_mesh_axes(mesh.axes()), " has ", mesh.world_size());
}
}  // namespace

std::unique_ptr<Communicator> split_axis(Communicator& world, const RankMesh& mesh, std::string_view axis,
                                         std::string name, bool share_counters) {
  check_world(world, mesh);
  if (name.empty()) name = std::string(axis);
  // Colour = group index and key = position, computed locally: the same numbers groups() lists.
  return world.split_by([&mesh, axis](int r) { return GroupSlot{mesh.group_index(axis, r), mesh.position(axis, r)}; },
                        std::move(name), share_counters);
}

std::unique_ptr<Communicator> split_intra_node(Communicator& world, const RankMesh& mesh, std::string name,
                                               bool share_counters) {
  check_world(world, mesh);
  return split_groups(world, mesh.intra_node_groups(), std::move(name), share_counters);
}

std::unique_ptr<Communicator> split_inter_node(Communicator& world, const RankMesh& mesh, std::string name,
                                               bool share_counters) {
  check_world(world, mesh);
  return split_groups(world, mesh.inter_node_groups(), std::move(name), share_counters);
}

}  // namespace hzp::coll
