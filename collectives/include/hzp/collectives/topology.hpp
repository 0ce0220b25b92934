// Topology: where each rank of a world lives: world size, the node of every rank, ranks per node
// (docs/topology.md). Built from the configuration (virtual nodes on one machine:
// topology.ranks_per_node), from Slurm's variables, or from the machine through MPI
// (topology_mpi.hpp). This header is MPI-free so that `hzpbench topology` and `hzpbench plan` work
// for any world size without starting MPI.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/types.hpp"

namespace hzp::coll {

/// Where a Topology's node map came from (printed by `hzpbench topology`, recorded in results).
enum class TopologySource : std::uint8_t {
  virtual_nodes,  // configuration: node(r) = r / ranks_per_node on whatever machine runs it
  slurm,          // SLURM_NTASKS / SLURM_NTASKS_PER_NODE, block distribution assumed
  machine,        // MPI shared-memory split of the running job (real nodes)
  explicit_map,   // a node map handed in by the caller (tests, tools)
};
std::string_view topology_source_name(TopologySource source) noexcept;

/// An immutable map rank -> node for one world. Nodes are numbered 0..num_nodes()-1 in order of
/// their lowest rank; a node's ranks are listed in increasing order and a rank's local rank is its
/// position there. Copyable and thread-safe to read.
class Topology {
 public:
  /// Pure (no MPI): `world_size` ranks on world_size / ranks_per_node virtual nodes,
  /// node(r) = r / ranks_per_node. Throws ConfigError (naming both numbers) unless
  /// world_size >= 1, ranks_per_node >= 1 and ranks_per_node divides world_size.
  /// `rank` is the calling rank (0 when used for printing or planning).
  static Topology virtual_nodes(int world_size, int ranks_per_node, int rank = 0);

  /// Pure: node_of_rank[r] is any key identifying r's node (hostname index, leader rank, ...);
  /// keys are renumbered densely in order of first appearance. Nodes may be non-contiguous and of
  /// unequal sizes (a machine can give that); uniform() tells whether ranks_per_node() is usable.
  static Topology from_node_map(std::span<const int> node_of_rank, int rank,
                                TopologySource source = TopologySource::explicit_map);

  /// From Slurm's environment without MPI: world size from SLURM_NTASKS (or SLURM_NPROCS), ranks per
  /// node from SLURM_NTASKS_PER_NODE (or a uniform SLURM_TASKS_PER_NODE such as "4(x2)"), rank from
  /// SLURM_PROCID. Assumes Slurm's default block distribution. nullopt when the variables are absent;
  /// ConfigError when they are present but inconsistent (non-uniform, not dividing). `getenv` is
  /// injectable for tests.
  using EnvLookup = const char* (*)(const char*);
  static std::optional<Topology> from_slurm_env(EnvLookup getenv_fn = nullptr);

  /// Applies `topology.ranks_per_node` to a topology discovered from the machine: 0 keeps `machine`;
  /// a positive value makes virtual nodes of that size, which must divide the world size and must
  /// not straddle a real node (a virtual node is a subset of one machine node), else ConfigError.
  static Topology with_ranks_per_node(const Topology& machine, int ranks_per_node);

  int world_size() const noexcept { return static_cast<int>(node_of_.size()); }
  int rank() const noexcept { return rank_; }
  int num_nodes() const noexcept { return static_cast<int>(node_ranks_.size()); }
  int node_of(int rank) const;
  /// Position of `rank` among the ranks of its node.
  int local_rank(int rank) const;
  /// The calling rank's node and local rank.
  int node() const { return node_of(rank_); }
  int local_rank() const { return local_rank(rank_); }
  /// World ranks on `node`, increasing.
  const std::vector<int>& ranks_on_node(int node) const;
  /// True when every node holds the same number of ranks.
  bool uniform() const noexcept { return uniform_; }
  /// Ranks per node; throws ConfigError when nodes are of unequal sizes (the message lists them).
  int ranks_per_node() const;
  /// True when every node's ranks are consecutive (r, r+1, ...): what the mesh's "innermost axis
  /// inside a node" layout relies on.
  bool contiguous() const noexcept { return contiguous_; }
  bool same_node(int a, int b) const { return node_of(a) == node_of(b); }
  /// intra when a and b share a node, inter otherwise (what counters and link emulation key on).
  LinkLevel link_level(int a, int b) const {
    return same_node(a, b) ? LinkLevel::intra : LinkLevel::inter;
  }
  TopologySource source() const noexcept { return source_; }
  /// Host names per node when discovered from the machine (empty otherwise).
  const std::vector<std::string>& node_names() const noexcept { return node_names_; }
  void set_node_names(std::vector<std::string> names);

  /// One line: "8 ranks on 4 nodes x 2 ranks (virtual_nodes)".
  std::string summary() const;
  /// Multi-line: the summary, then one line per node with its ranks.
  std::string describe() const;

 private:
  Topology() = default;
  void check_rank(int r, const char* what) const;

  int rank_ = 0;
  std::vector<int> node_of_;                 // per world rank
  std::vector<int> local_rank_;              // per world rank
  std::vector<std::vector<int>> node_ranks_; // per node
  std::vector<std::string> node_names_;
  bool uniform_ = true;
  bool contiguous_ = true;
  TopologySource source_ = TopologySource::explicit_map;
};

/// "{0, 1, 2, 3}": how groups are printed in messages, docs and `hzpbench topology`.
std::string format_ranks(std::span<const int> ranks);

}  // namespace hzp::coll
