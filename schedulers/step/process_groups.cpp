// ParallelDims (validation, the mesh, expert groups) and ProcessGroups (the communicators split from the
// world along the mesh's axes): process_groups.hpp.
#include "hzp/schedulers/step/process_groups.hpp"

#include <algorithm>
#include <sstream>

#include "hzp/collectives/mesh_comm.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {

std::string ParallelDims::describe() const {
  std::ostringstream o;
  o << "pp=" << pp << " dp_replicate=" << dp_replicate << " dp_shard=" << dp_shard << " cp=" << cp << " tp=" << tp
    << " ep=" << ep;
  return o.str();
}

void ParallelDims::validate(const coll::Topology& topology) const {
  const int w = topology.world_size();
  std::ostringstream bad;
  const std::pair<const char*, int> degrees[] = {{"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"cp", cp},
                                                 {"tp", tp}, {"pp", pp}, {"ep", ep}};
  bool positive = true;
  for (const auto& [name, v] : degrees)
    if (v < 1) {
      bad << "\n  " << name << " = " << v << " must be >= 1";
      positive = false;
    }
  if (positive) {
    if (product() != w)
      bad << "\n  pp · dp_replicate · dp_shard · cp · tp = " << pp << " · " << dp_replicate << " · " << dp_shard
          << " · " << cp << " · " << tp << " = " << product() << ", not the world size W = " << w;
    if ((dp() * cp) % ep != 0)
      bad << "\n  ep = " << ep << " does not divide dp_replicate · dp_shard · cp = " << dp() * cp
          << " (expert groups are carved out of the data × context ranks)";
    // tp is innermost: its groups are runs of tp consecutive ranks; each must sit on one node.
    if (!tp_across_nodes && product() == w && tp > 1)
      for (int first = 0; first < w; first += tp)
        if (topology.node_of(first) != topology.node_of(first + tp - 1)) {
          bad << "\n  tp = " << tp << ": the tensor-parallel group of ranks " << first << ".." << first + tp - 1
              << " spans nodes " << topology.node_of(first) << " and " << topology.node_of(first + tp - 1) << " ("
              << topology.summary() << "); tensor parallelism communicates every layer, so its group stays inside "
              << "a node unless scheduler.tp_across_nodes is set";
          break;
        }
  }
  if (!bad.str().empty())
    HZP_THROW(ConfigError, "parallel degrees ", describe(), " at world size W = ", w, ":", bad.str(),
              "\n  fix: choose degrees >= 1 whose product pp · dp_replicate · dp_shard · cp · tp is W, with ep dividing "
              "dp · cp and tp dividing the ranks per node");
}

coll::RankMesh ParallelDims::mesh(const coll::Topology& topology) const {
  validate(topology);
  // tp_across_nodes lifts the mesh's own demand too: the innermost axis is only held inside a node when
  // its size divides the ranks per node, which validate() has already checked otherwise.
  return coll::RankMesh(topology, {{std::string(kAxisPipeline), pp},
                                   {std::string(kAxisReplicate), dp_replicate},
                                   {std::string(kAxisShard), dp_shard},
                                   {std::string(kAxisContext), cp},
                                   {std::string(kAxisTensor), tp}});
}

coll::RankGroups ParallelDims::expert_groups(const coll::RankMesh& mesh) const {
  const std::string_view dc[] = {kAxisReplicate, kAxisShard, kAxisContext};
  coll::RankGroups out;
  for (const std::vector<int>& g : mesh.groups(dc))
    for (std::size_t i = 0; i < g.size(); i += static_cast<std::size_t>(ep))
      out.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(i), g.begin() + static_cast<std::ptrdiff_t>(i) + ep);
  return out;
}

coll::RankGroups ParallelDims::expert_data_groups(const coll::RankMesh& mesh) const {
  const std::string_view dc[] = {kAxisReplicate, kAxisShard, kAxisContext};
  coll::RankGroups out;
  for (const std::vector<int>& g : mesh.groups(dc))
    for (std::size_t i = 0; i < static_cast<std::size_t>(ep); ++i) {
      std::vector<int> same;
      for (std::size_t j = i; j < g.size(); j += static_cast<std::size_t>(ep)) same.push_back(g[j]);
      out.push_back(std::move(same));
    }
  return out;
}

coll::RankGroups ParallelDims::expert_distinct_groups(const coll::RankMesh& mesh) const {
  // Every data × context group lists its members in the same position order, so the j-th expert group of each
  // (one per pipeline stage and tensor coordinate) joins the j-th of the others.
  const std::string_view dc[] = {kAxisReplicate, kAxisShard, kAxisContext};
  const coll::RankGroups groups = mesh.groups(dc);
  const std::size_t per = groups.empty() ? 0 : groups.front().size() / static_cast<std::size_t>(ep);
  coll::RankGroups out(per);
  for (const std::vector<int>& g : groups)
    for (std::size_t j = 0; j < per; ++j)
      out[j].insert(out[j].end(), g.begin() + static_cast<std::ptrdiff_t>(j) * ep,
                    g.begin() + static_cast<std::ptrdiff_t>(j + 1) * ep);
  for (std::vector<int>& g : out) std::sort(g.begin(), g.end());
  return out;
}

std::vector<std::string_view> data_parallel_axes() { return {kAxisReplicate, kAxisShard}; }
std::vector<std::string_view> data_context_axes() { return {kAxisReplicate, kAxisShard, kAxisContext}; }

std::vector<int> data_parallel_ranks(const coll::RankMesh& mesh, int rank) {
  return mesh.group(data_parallel_axes(), rank);
}

std::vector<int> data_context_ranks(const coll::RankMesh& mesh, int rank) {
  return mesh.group(data_context_axes(), rank);
}

ProcessGroups::ProcessGroups(coll::Communicator& world, const ParallelDims& dims, const coll::Topology& topology)
    : world_(world), dims_(dims), mesh_(dims.mesh(topology)) {
  HZP_CHECK(world.size() == mesh_.world_size(), "process groups: communicator '", world.name(), "' has ",
            world.size(), " ranks but the degrees ", dims.describe(), " describe ", mesh_.world_size());
  const int w = world.size();
  // One fixed order on every rank: each split is collective over the world.
  if (dims.dp() != w) dp_ = split(data_parallel_axes(), "dp");
  if (dims.dp() * dims.cp != w) dp_cp_ = split(data_context_axes(), "dp_cp");
  if (dims.tp > 1) tp_ = split({kAxisTensor}, "tp");
  if (dims.pp > 1) pp_ = split({kAxisPipeline}, "pp");
  if (dims.cp > 1) cp_ = split({kAxisContext}, "cp");
  if (dims.ep > 1) ep_ = coll::split_groups(world, dims.expert_groups(mesh_), "ep");
}

ProcessGroups::~ProcessGroups() = default;

std::unique_ptr<coll::Communicator> ProcessGroups::split(std::vector<std::string_view> axes, std::string name) const {
  return coll::split_groups(world_, mesh_.groups(axes), std::move(name));
}

}  // namespace hzp::schedulers
