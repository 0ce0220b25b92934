// RankMesh: the world's ranks laid out on a factorisation of W into named axes (as Megatron's
// parallel state and PyTorch's DeviceMesh do), innermost axis fastest-varying so that it lands inside
// a node; groups along any axis or set of axes, the intra-node / inter-node groups, and the
// contiguous / strided group sets of hierarchical sharding (HSDP, AsyncHZP's z1/z2/z3). Pure: no
// MPI; mesh_comm.hpp turns groups into communicators. Layout rules: docs/topology.md.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/topology.hpp"

namespace hzp::coll {

/// One axis of a mesh. size = -1 (at most one axis) is inferred as W / (product of the others).
/// within_node = true demands that every group along this axis lies inside one node (tensor
/// parallelism, say); the innermost axis gets that demand implicitly when its size divides the
/// ranks per node.
struct MeshAxis {
  std::string name;
  int size = 1;
  bool within_node = false;
};

/// A set of groups: each a list of world ranks in increasing position order.
using RankGroups = std::vector<std::vector<int>>;

/// Parses "replica=2,shard=4" (outermost first; "name=-1" infers one size; a trailing "@node" on
/// a size, as in "tp=2@node", sets within_node). Throws ConfigError naming the offending piece.
std::vector<MeshAxis> parse_mesh_axes(std::string_view spec);
/// "replica=2,shard=4": the inverse of parse_mesh_axes (with resolved sizes).
std::string format_mesh_axes(std::span<const MeshAxis> axes);

/// Immutable once built; copyable and thread-safe to read. Rank r's coordinates are the mixed-radix
/// digits of r with the last axis least significant: r = sum_i coord[i] * stride[i],
/// stride[last] = 1.
class RankMesh {
 public:
  /// Validates: at least one axis, unique non-empty names, every size >= 1 (or one -1), product
  /// equal to topology.world_size(), and the within-node demands. Throws ConfigError naming every
  /// number involved.
  RankMesh(Topology topology, std::vector<MeshAxis> axes);

  /// The two-axis mesh of hierarchical sharding: `replica_axis` = W/Z outer, `shard_axis` = Z inner
  /// (shard groups contiguous, replicas strided by Z).
  static RankMesh sharded(Topology topology, int shard_size, std::string shard_axis = "shard",
                          std::string replica_axis = "replica");

  const Topology& topology() const noexcept { return topology_; }
  int world_size() const noexcept { return topology_.world_size(); }
  int ndim() const noexcept { return static_cast<int>(axes_.size()); }
  const std::vector<MeshAxis>& axes() const noexcept { return axes_; }
  /// Index of the named axis; ConfigError listing the mesh's axes when absent.
  int axis_index(std::string_view axis) const;
  int axis_size(std::string_view axis) const { return axes_[axis_index(axis)].size; }

  std::vector<int> coord(int rank) const;
  int rank_of(std::span<const int> coord) const;

  /// Position of `rank` inside its group along `axis` (its coordinate on that axis): the key
  /// for a communicator split.
  int position(std::string_view axis, int rank) const;
  /// Which group along `axis` holds `rank`, 0 .. num_groups(axis)-1: the colour for a split.
  /// Groups are numbered by the mixed-radix value of the other coordinates (outermost first).
  int group_index(std::string_view axis, int rank) const;
  int num_groups(std::string_view axis) const { return world_size() / axis_size(axis); }
  /// World ranks of the group along `axis` that contains `rank`, in position order.
  std::vector<int> group(std::string_view axis, int rank) const;
  /// Every group along `axis`, in group_index order.
  RankGroups groups(std::string_view axis) const;
  /// Group along several axes at once (e.g. {"replica", "shard"} = a flattened data-parallel group):
  /// the ranks that agree with `rank` on every other axis, in rank order.
  std::vector<int> group(std::span<const std::string_view> axes, int rank) const;
  RankGroups groups(std::span<const std::string_view> axes) const;
  /// True when every group along `axis` lies inside one node.
  bool within_node(std::string_view axis) const;

  /// The ranks sharing `rank`'s node, and the ranks with `rank`'s local rank on every node (the
  /// group an inter-node collective of a hierarchical scheme uses). Both come from the topology,
  /// not from the axes.
  std::vector<int> intra_node_group(int rank) const;
  std::vector<int> inter_node_group(int rank) const;
  RankGroups intra_node_groups() const;
  RankGroups inter_node_groups() const;

  /// Multi-line: topology, then for each axis its groups and whether they stay inside nodes, then
  /// the intra- and inter-node groups. What `hzpbench topology` prints.
  std::string describe() const;

 private:
  void check_rank(int rank) const;
  std::vector<int> axis_mask(std::span<const std::string_view> axes) const;
  int group_index_masked(const std::vector<int>& in_group, int rank) const;

  Topology topology_;
  std::vector<MeshAxis> axes_;
  std::vector<int> stride_;
};

/// Hierarchical sharding without a mesh: W/Z contiguous groups of Z ranks ({0..Z-1}, {Z..2Z-1}, ...)
/// and the Z strided groups holding each position's W/Z replicas ({p, p+Z, p+2Z, ...}).
/// ConfigError unless 1 <= group_size and group_size divides world_size.
RankGroups contiguous_groups(int world_size, int group_size);
RankGroups strided_groups(int world_size, int group_size);

}  // namespace hzp::coll
