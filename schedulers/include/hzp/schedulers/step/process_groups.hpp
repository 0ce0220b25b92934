// The process groups of a run, made from one description: the parallel degrees (data-parallel replicate and
// shard, context, tensor, pipeline; expert folded into data × context) build one RankMesh, and every
// communicator a scheduler or a model uses is split from the world along its axes. A plain data-parallel
// scheduler is the case where every degree but data parallelism is 1. docs/architecture.md "Process groups".
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/mesh.hpp"
#include "hzp/collectives/topology.hpp"

namespace hzp::schedulers {

/// The degrees of parallelism. The mesh nests them, outermost first, as pp, dp_replicate, dp_shard, cp, tp:
/// tensor-parallel ranks are consecutive (inside a node), pipeline stages the farthest apart. Expert
/// parallelism does not multiply the world: its groups are ep consecutive ranks of the data × context group
/// (as Megatron-Core and torchtitan fold it), so ep divides dp_replicate · dp_shard · cp.
struct ParallelDims {
  int dp_replicate = 1;  ///< replicas of the (sharded) model state
  int dp_shard = 1;      ///< ranks one replica's model state is sharded over
  int cp = 1;            ///< context parallel: the sequence split over ranks
  int tp = 1;            ///< tensor parallel: matrices split over ranks
  int pp = 1;            ///< pipeline stages
  int ep = 1;            ///< expert parallel (inside dp_replicate · dp_shard · cp)
  /// A tensor-parallel group is refused across nodes unless this says it may (its all-reduces would run at
  /// inter-node bandwidth on every layer).
  bool tp_across_nodes = false;

  bool operator==(const ParallelDims&) const = default;
  int dp() const noexcept { return dp_replicate * dp_shard; }
  /// The ranks the degrees describe: dp · cp · tp · pp.
  long long product() const noexcept { return 1LL * dp() * cp * tp * pp; }
  /// "pp=1 dp_replicate=2 dp_shard=4 cp=1 tp=1 ep=1"
  std::string describe() const;
  /// ConfigError naming every degree, their product and W, when a degree is below 1, the product is not W,
  /// ep does not divide dp · cp, or a tensor-parallel group would span nodes of `topology` without
  /// tp_across_nodes; one message listing every problem.
  void validate(const coll::Topology& topology) const;
  /// The mesh over `topology`'s world (validates first). Axes: pp, dp_replicate, dp_shard, cp, tp.
  coll::RankMesh mesh(const coll::Topology& topology) const;
  /// The expert-parallel groups: each run of ep consecutive members of a data × context group.
  coll::RankGroups expert_groups(const coll::RankMesh& mesh) const;
  /// The expert-data-parallel groups: the members of a data × context group that hold the same experts (the same
  /// position in their expert group), {g[i], g[i + ep], g[i + 2·ep], ...}: where expert weights' gradients are
  /// summed (dp · cp / ep ranks).
  coll::RankGroups expert_data_groups(const coll::RankMesh& mesh) const;
  /// The ranks whose expert pieces and pipeline stages together hold the model once: for each expert-data position
  /// j, the expert group at j of every pipeline stage (and every tensor and context coordinate): where the norm of an
  /// expert-parallel model is summed.
  coll::RankGroups expert_distinct_groups(const coll::RankMesh& mesh) const;
};

/// The mesh's axis names, outermost first.
inline constexpr std::string_view kAxisPipeline = "pp", kAxisReplicate = "dp_replicate", kAxisShard = "dp_shard",
                                  kAxisContext = "cp", kAxisTensor = "tp";

/// The axes of the data-parallel group (the replicas and shards of one piece of the model).
std::vector<std::string_view> data_parallel_axes();
/// The world ranks of `rank`'s data-parallel group in `mesh`, in rank order (what ProcessGroups::data_parallel()
/// holds; the plan's groups are made from it).
std::vector<int> data_parallel_ranks(const coll::RankMesh& mesh, int rank);
/// The axes of the data × context group (data_parallel_axes() and cp: where gradients are summed) and its world
/// ranks for `rank` (what ProcessGroups::data_context() holds).
std::vector<std::string_view> data_context_axes();
std::vector<int> data_context_ranks(const coll::RankMesh& mesh, int rank);

/// The communicators of one rank, split from the world once, in a fixed order on every rank (collective
/// over `world`). A group of one rank is not split: its accessor returns nullptr. A group that is the whole
/// world is not split either: its accessor returns the world itself, so counters and names stay the
/// world's (ddp's "dp" duplicate is still its own choice).
class ProcessGroups {
 public:
  /// world.size() must equal dims.product() and topology.world_size(); world.rank() is the mesh rank.
  ProcessGroups(coll::Communicator& world, const ParallelDims& dims, const coll::Topology& topology);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  const ParallelDims& dims() const noexcept { return dims_; }
  const coll::RankMesh& mesh() const noexcept { return mesh_; }
  coll::Communicator& world() const noexcept { return world_; }
  int rank() const noexcept { return world_.rank(); }

  /// The ranks holding the same piece of the model (same tp, pp and cp coordinates): dp_replicate × dp_shard.
  /// Gradients of data parallelism are reduced here (with cp, over data_context()).
  coll::Communicator& data_parallel() const { return *pick(dp_); }
  /// data_parallel() × cp: where gradients are reduced when the sequence is split.
  coll::Communicator& data_context() const { return *pick(dp_cp_); }
  coll::Communicator* tensor() const { return tp_.get(); }
  coll::Communicator* pipeline() const { return pp_.get(); }
  coll::Communicator* context() const { return cp_.get(); }
  coll::Communicator* expert() const { return ep_.get(); }

  /// A further communicator along `axes` of the mesh (collective over the world; every rank must ask for
  /// the same axes in the same order), named `name`: e.g. {dp_shard} "shard", {dp_replicate} "replica".
  std::unique_ptr<coll::Communicator> split(std::vector<std::string_view> axes, std::string name) const;

 private:
  coll::Communicator* pick(const std::unique_ptr<coll::Communicator>& c) const { return c ? c.get() : &world_; }

  coll::Communicator& world_;
  ParallelDims dims_;
  coll::RankMesh mesh_;
  // nullptr: the group is the whole world (dp_, dp_cp_) or a single rank (the others).
  std::unique_ptr<coll::Communicator> dp_, dp_cp_, tp_, pp_, cp_, ep_;
};

}  // namespace hzp::schedulers
