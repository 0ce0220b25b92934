// Topology construction from a node map, from the configuration (virtual nodes) and from Slurm's
// environment; all pure (no MPI). The MPI discovery lives in topology_mpi.cpp.
#include "hzp/collectives/topology.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "hzp/core/error.hpp"

namespace hzp::coll {

std::string_view topology_source_name(TopologySource source) noexcept {
  switch (source) {
    case TopologySource::virtual_nodes: return "virtual_nodes";
    case TopologySource::slurm: return "slurm";
    case TopologySource::machine: return "machine";
    case TopologySource::explicit_map: return "explicit_map";
  }
  return "?";
}

std::string format_ranks(std::span<const int> ranks) {
  std::ostringstream os;
  os << '{';
  for (std::size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << '}';
  return os.str();
}

Topology Topology::from_node_map(std::span<const int> node_of_rank, int rank, TopologySource source) {
  const int w = static_cast<int>(node_of_rank.size());
  if (w < 1) HZP_THROW(ConfigError, "topology: world size must be at least 1, got ", w);
  if (rank < 0 || rank >= w)
    HZP_THROW(ConfigError, "topology: rank ", rank, " is outside the world of ", w, " ranks");
  Topology t;
  t.rank_ = rank;
  t.source_ = source;
  t.node_of_.resize(w);
  t.local_rank_.resize(w);
  // Dense renumbering in order of first appearance = order of each node's lowest rank.
  std::map<int, int> dense;
  for (int r = 0; r < w; ++r) {
    auto [it, inserted] = dense.try_emplace(node_of_rank[r], static_cast<int>(dense.size()));
    if (inserted) t.node_ranks_.emplace_back();
    const int n = it->second;
    t.node_of_[r] = n;
    t.local_rank_[r] = static_cast<int>(t.node_ranks_[n].size());
    t.node_ranks_[n].push_back(r);
  }
  for (const auto& ranks : t.node_ranks_) {
    if (ranks.size() != t.node_ranks_.front().size()) t.uniform_ = false;
    if (ranks.back() - ranks.front() + 1 != static_cast<int>(ranks.size())) t.contiguous_ = false;
  }
  return t;
}

Topology Topology::virtual_nodes(int world_size, int ranks_per_node, int rank) {
  if (world_size < 1)
    HZP_THROW(ConfigError, "topology.world_size = ", world_size, " must be at least 1");
  if (ranks_per_node < 1)
    HZP_THROW(ConfigError, "topology.ranks_per_node = ", ranks_per_node,
              " must be at least 1 for virtual nodes (0 means: take nodes from the machine)");
  if (world_size % ranks_per_node != 0)
    HZP_THROW(ConfigError, "topology.ranks_per_node = ", ranks_per_node,
              " does not divide the world size ", world_size, " (", world_size, " = ",
              world_size / ranks_per_node, " x ", ranks_per_node, " + ", world_size % ranks_per_node,
              "); choose a divisor of ", world_size);
  std::vector<int> map(world_size);
  for (int r = 0; r < world_size; ++r) map[r] = r / ranks_per_node;
  if (rank < 0 || rank >= world_size)
    HZP_THROW(ConfigError, "topology: rank ", rank, " is outside the world of ", world_size, " ranks");
  return from_node_map(map, rank, TopologySource::virtual_nodes);
}

namespace {

// Parses a positive integer; nullopt when s is absent, empty or not entirely digits.
std::optional<int> parse_positive(const char* s) {
  if (s == nullptr || *s == '\0') return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v <= 0 || v > (1 << 30)) return std::nullopt;
  return static_cast<int>(v);
}

// SLURM_TASKS_PER_NODE looks like "4", "4(x2)" or "4(x2),3": uniform only when it has one entry.
std::optional<int> uniform_tasks_per_node(const char* s) {
  if (s == nullptr || *s == '\0') return std::nullopt;
  const std::string v(s);
  if (v.find(',') != std::string::npos)
    HZP_THROW(ConfigError, "SLURM_TASKS_PER_NODE = '", v,
              "' gives nodes different task counts; set topology.ranks_per_node explicitly or "
              "submit with --ntasks-per-node");
  return parse_positive(v.substr(0, v.find('(')).c_str());
}

}  // namespace

std::optional<Topology> Topology::from_slurm_env(EnvLookup getenv_fn) {
  if (getenv_fn == nullptr) getenv_fn = [](const char* k) -> const char* { return std::getenv(k); };
  const char* ntasks_s = getenv_fn("SLURM_NTASKS");
  if (ntasks_s == nullptr) ntasks_s = getenv_fn("SLURM_NPROCS");
  if (ntasks_s == nullptr) return std::nullopt;
  const auto ntasks = parse_positive(ntasks_s);
  if (!ntasks) HZP_THROW(ConfigError, "SLURM_NTASKS = '", ntasks_s, "' is not a positive integer");
  std::optional<int> per_node = parse_positive(getenv_fn("SLURM_NTASKS_PER_NODE"));
  if (!per_node) per_node = uniform_tasks_per_node(getenv_fn("SLURM_TASKS_PER_NODE"));
  if (!per_node) return std::nullopt;
  int rank = 0;
  if (const char* p = getenv_fn("SLURM_PROCID")) {
    char* end = nullptr;
    rank = static_cast<int>(std::strtol(p, &end, 10));
  }
  if (*ntasks % *per_node != 0)
    HZP_THROW(ConfigError, "Slurm gives ", *ntasks, " tasks at ", *per_node,
              " per node, which does not divide; the last node would hold ", *ntasks % *per_node);
  std::vector<int> map(*ntasks);
  for (int r = 0; r < *ntasks; ++r) map[r] = r / *per_node;
  return from_node_map(map, rank, TopologySource::slurm);
}

Topology Topology::with_ranks_per_node(const Topology& machine, int ranks_per_node) {
  if (ranks_per_node == 0) return machine;
  Topology v = virtual_nodes(machine.world_size(), ranks_per_node, machine.rank());
  // A virtual node must live inside one real node: otherwise "intra-node" traffic would cross the
  // real network and the emulated intra link would model the wrong thing.
  for (int n = 0; n < v.num_nodes(); ++n) {
    const auto& ranks = v.ranks_on_node(n);
    for (int r : ranks)
      if (machine.node_of(r) != machine.node_of(ranks.front()))
        HZP_THROW(ConfigError, "topology.ranks_per_node = ", ranks_per_node, ": virtual node ", n,
                  " = ranks ", format_ranks(ranks), " would straddle machine nodes ",
                  machine.node_of(ranks.front()), " and ", machine.node_of(r),
                  " (the machine has ", machine.num_nodes(), " nodes for ", machine.world_size(),
                  " ranks); choose a divisor of the machine's ranks per node");
  }
  if (!machine.node_names().empty()) {
    // Keep the real host in the name so a printout shows which machine holds each virtual node.
    std::vector<std::string> names;
    for (int n = 0; n < v.num_nodes(); ++n)
      names.push_back(machine.node_names()[machine.node_of(v.ranks_on_node(n).front())] + "/v" +
                      std::to_string(n));
    v.set_node_names(std::move(names));
  }
  return v;
}

void Topology::check_rank(int r, const char* what) const {
  if (r < 0 || r >= world_size())
    HZP_THROW(PreconditionError, what, ": rank ", r, " is outside the world of ", world_size(), " ranks");
}

int Topology::node_of(int r) const {
  check_rank(r, "node_of");
  return node_of_[r];
}

int Topology::local_rank(int r) const {
  check_rank(r, "local_rank");
  return local_rank_[r];
}

const std::vector<int>& Topology::ranks_on_node(int node) const {
  HZP_CHECK(node >= 0 && node < num_nodes(), "node ", node, " is outside 0..", num_nodes() - 1);
  return node_ranks_[node];
}

int Topology::ranks_per_node() const {
  if (!uniform_) {
    std::ostringstream sizes;
    for (int n = 0; n < num_nodes(); ++n) sizes << (n ? ", " : "") << node_ranks_[n].size();
    HZP_THROW(ConfigError, "nodes hold different numbers of ranks (", sizes.str(), " for nodes 0..",
              num_nodes() - 1, " of a world of ", world_size(),
              "); set topology.ranks_per_node to a divisor of every node's count");
  }
  return static_cast<int>(node_ranks_.front().size());
}

void Topology::set_node_names(std::vector<std::string> names) {
  HZP_CHECK(names.empty() || static_cast<int>(names.size()) == num_nodes(), "got ", names.size(),
            " node names for ", num_nodes(), " nodes");
  node_names_ = std::move(names);
}

std::string Topology::summary() const {
  std::ostringstream os;
  os << world_size() << (world_size() == 1 ? " rank" : " ranks") << " on " << num_nodes()
     << (num_nodes() == 1 ? " node" : " nodes");
  if (uniform_) os << " x " << node_ranks_.front().size() << " ranks";
  else os << " of unequal sizes";
  os << " (" << topology_source_name(source_) << ")";
  return os.str();
}

std::string Topology::describe() const {
  std::ostringstream os;
  os << summary() << '\n';
  for (int n = 0; n < num_nodes(); ++n) {
    os << "  node " << n;
    if (!node_names_.empty()) os << " (" << node_names_[n] << ")";
    os << ": ranks " << format_ranks(node_ranks_[n]) << '\n';
  }
  return os.str();
}

}  // namespace hzp::coll
