// RankMesh: validation, mixed-radix coordinates, groups along axes, node groups, and the printout
// of `hzpbench topology`. Pure; O(W) per group query, which is nothing next to building a
// communicator.
#include "hzp/collectives/mesh.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "hzp/core/error.hpp"

namespace hzp::coll {
namespace {

bool valid_axis_name(std::string_view n) {
  if (n.empty()) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

// "{0, 1} {2, 3} ..." wrapped so a long list stays readable in a terminal.
void print_groups(std::ostringstream& os, const RankGroups& groups) {
  std::size_t col = 0;
  os << "    ";
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string s = format_ranks(groups[g]);
    if (col > 0 && col + s.size() + 1 > 96) {
      os << "\n    ";
      col = 0;
    }
    os << (col ? " " : "") << s;
    col += s.size() + 1;
  }
  os << '\n';
}

}  // namespace

std::vector<MeshAxis> parse_mesh_axes(std::string_view spec) {
  std::vector<MeshAxis> axes;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string piece = trim(spec.substr(start, comma - start));
    start = comma + 1;
    const auto eq = piece.find('=');
    if (eq == std::string::npos)
      HZP_THROW(ConfigError, "mesh '", spec, "': piece '", piece,
                "' is not name=size (write e.g. replica=2,shard=4)");
    MeshAxis a;
    a.name = trim(std::string_view(piece).substr(0, eq));
    std::string size = trim(std::string_view(piece).substr(eq + 1));
    if (size.size() >= 5 && size.ends_with("@node")) {
      a.within_node = true;
      size.resize(size.size() - 5);
    }
    char* end = nullptr;
    const long v = std::strtol(size.c_str(), &end, 10);
    if (size.empty() || *end != '\0' || v < -1 || v > (1 << 24))
      HZP_THROW(ConfigError, "mesh '", spec, "': size '", size, "' of axis '", a.name,
                "' is not an integer >= 0 (or -1 to infer it)");
    a.size = static_cast<int>(v);
    axes.push_back(std::move(a));
    if (comma == spec.size()) break;
  }
  return axes;
}

std::string format_mesh_axes(std::span<const MeshAxis> axes) {
  std::ostringstream os;
  for (std::size_t i = 0; i < axes.size(); ++i)
    os << (i ? "," : "") << axes[i].name << '=' << axes[i].size << (axes[i].within_node ? "@node" : "");
  return os.str();
}

RankMesh::RankMesh(Topology topology, std::vector<MeshAxis> axes)
    : topology_(std::move(topology)), axes_(std::move(axes)) {
  const int w = topology_.world_size();
  if (axes_.empty()) HZP_THROW(ConfigError, "a rank mesh needs at least one axis (world size ", w, ")");
  int inferred = -1;
  long long known = 1;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    const MeshAxis& a = axes_[i];
    if (!valid_axis_name(a.name))
      HZP_THROW(ConfigError, "mesh axis name '", a.name, "' must be non-empty letters, digits or _");
    for (std::size_t j = 0; j < i; ++j)
      if (axes_[j].name == a.name)
        HZP_THROW(ConfigError, "mesh axis '", a.name, "' appears twice in ", format_mesh_axes(axes_));
    if (a.size == -1) {
      if (inferred >= 0)
        HZP_THROW(ConfigError, "mesh ", format_mesh_axes(axes_), ": only one axis size may be -1 ('",
                  axes_[inferred].name, "' and '", a.name, "' both are)");
      inferred = static_cast<int>(i);
    } else if (a.size < 1) {
      HZP_THROW(ConfigError, "mesh ", format_mesh_axes(axes_), ": axis '", a.name, "' has size ", a.size,
                "; every axis needs at least 1 rank (world size ", w, ")");
    } else {
      known *= a.size;
    }
  }
  if (inferred >= 0) {
    if (known > w || w % known != 0)
      HZP_THROW(ConfigError, "mesh ", format_mesh_axes(axes_), ": cannot infer axis '",
                axes_[inferred].name, "': world size ", w, " is not a multiple of ", known,
                " (the product of the other axes)");
    axes_[inferred].size = static_cast<int>(w / known);
    known = w;
  }
  if (known != w) {
    std::ostringstream prod;
    for (std::size_t i = 0; i < axes_.size(); ++i) prod << (i ? " x " : "") << axes_[i].size;
    HZP_THROW(ConfigError, "mesh ", format_mesh_axes(axes_), " has ", prod.str(), " = ", known,
              " ranks but the world has ", w, " (topology.world_size); the axis sizes must multiply to ", w);
  }
  stride_.assign(axes_.size(), 1);
  for (int i = ndim() - 2; i >= 0; --i) stride_[i] = stride_[i + 1] * axes_[i + 1].size;

  // Within-node demands. The innermost axis gets one implicitly when its size divides the ranks per
  // node: with contiguous nodes that always holds, so a failure means the machine placed ranks
  // round-robin and "intra" groups would silently run over the network.
  for (int i = 0; i < ndim(); ++i) {
    const MeshAxis& a = axes_[i];
    const bool implicit = i == ndim() - 1 && topology_.uniform() &&
                          topology_.ranks_per_node() % a.size == 0;
    if (!a.within_node && !implicit) continue;
    for (const auto& g : groups(a.name)) {
      const int n0 = topology_.node_of(g.front());
      for (int r : g) {
        if (topology_.node_of(r) == n0) continue;
        std::ostringstream nodes;
        nodes << "ranks " << g.front() << " and " << r << " are on nodes " << n0 << " and "
              << topology_.node_of(r);
        HZP_THROW(ConfigError, "mesh ", format_mesh_axes(axes_), ": axis '", a.name, "' (size ", a.size,
                  ", stride ", stride_[i], ") should stay inside a node, but its group ", format_ranks(g),
                  " does not: ", nodes.str(), " (", topology_.summary(), ")",
                  a.within_node ? "; make its size divide the ranks per node and its stride 1"
                                : "; ranks are not placed node by node: launch with block placement "
                                  "or set topology.ranks_per_node");
      }
    }
  }
}

RankMesh RankMesh::sharded(Topology topology, int shard_size, std::string shard_axis,
                           std::string replica_axis) {
  const int w = topology.world_size();
  if (shard_size < 1 || w % shard_size != 0)
    HZP_THROW(ConfigError, "shard group size ", shard_size, " must be at least 1 and divide the world size ", w);
  return RankMesh(std::move(topology),
                  {MeshAxis{std::move(replica_axis), w / shard_size}, MeshAxis{std::move(shard_axis), shard_size}});
}

int RankMesh::axis_index(std::string_view axis) const {
  for (int i = 0; i < ndim(); ++i)
    if (axes_[i].name == axis) return i;
  std::ostringstream names;
  for (int i = 0; i < ndim(); ++i) names << (i ? ", " : "") << axes_[i].name;
  HZP_THROW(ConfigError, "mesh has no axis '", axis, "'; its axes are: ", names.str());
}

void RankMesh::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size())
    HZP_THROW(PreconditionError, "rank ", rank, " is outside the mesh's world of ", world_size(), " ranks");
}

std::vector<int> RankMesh::coord(int rank) const {
  check_rank(rank);
  std::vector<int> c(axes_.size());
  for (int i = 0; i < ndim(); ++i) c[i] = (rank / stride_[i]) % axes_[i].size;
  return c;
}

int RankMesh::rank_of(std::span<const int> c) const {
  HZP_CHECK(static_cast<int>(c.size()) == ndim(), "coordinate has ", c.size(), " entries, mesh has ",
            ndim(), " axes");
  int r = 0;
  for (int i = 0; i < ndim(); ++i) {
    HZP_CHECK(c[i] >= 0 && c[i] < axes_[i].size, "coordinate ", c[i], " of axis '", axes_[i].name,
              "' is outside 0..", axes_[i].size - 1);
    r += c[i] * stride_[i];
  }
  return r;
}

int RankMesh::position(std::string_view axis, int rank) const { return coord(rank)[axis_index(axis)]; }

std::vector<int> RankMesh::axis_mask(std::span<const std::string_view> axes) const {
  HZP_CHECK(!axes.empty(), "a group needs at least one axis");
  std::vector<int> in(axes_.size(), 0);
  for (auto a : axes) in[axis_index(a)] = 1;
  return in;
}

int RankMesh::group_index_masked(const std::vector<int>& in_group, int rank) const {
  // coord(rank)'s digits without its vector: groups() asks this for every rank of the world, and `hzpbench simulate`
  // builds a mesh's groups for every rank it describes.
  check_rank(rank);
  int g = 0;
  for (int i = 0; i < ndim(); ++i)
    if (!in_group[i]) g = g * axes_[i].size + (rank / stride_[i]) % axes_[i].size;
  return g;
}

int RankMesh::group_index(std::string_view axis, int rank) const {
  const std::string_view a[] = {axis};
  return group_index_masked(axis_mask(a), rank);
}

std::vector<int> RankMesh::group(std::string_view axis, int rank) const {
  const int i = axis_index(axis);
  const int base = rank - coord(rank)[i] * stride_[i];
  std::vector<int> g(static_cast<std::size_t>(axes_[i].size));
  for (int k = 0; k < axes_[i].size; ++k) g[k] = base + k * stride_[i];
  return g;
}

RankGroups RankMesh::groups(std::string_view axis) const {
  const std::string_view a[] = {axis};
  return groups(a);
}

std::vector<int> RankMesh::group(std::span<const std::string_view> axes, int rank) const {
  const auto mask = axis_mask(axes);
  const int g = group_index_masked(mask, rank);
  std::vector<int> out;
  for (int r = 0; r < world_size(); ++r)
    if (group_index_masked(mask, r) == g) out.push_back(r);
  return out;
}

RankGroups RankMesh::groups(std::span<const std::string_view> axes) const {
  const auto mask = axis_mask(axes);
  int size = 1;
  for (int i = 0; i < ndim(); ++i)
    if (mask[i]) size *= axes_[i].size;
  // Ranks visited in increasing order land in each group in position order (the in-group digits
  // grow with the rank).
  RankGroups out(static_cast<std::size_t>(world_size() / size));
  for (std::vector<int>& g : out) g.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < world_size(); ++r) out[group_index_masked(mask, r)].push_back(r);
  return out;
}

bool RankMesh::within_node(std::string_view axis) const {
  for (const auto& g : groups(axis))
    for (int r : g)
      if (!topology_.same_node(r, g.front())) return false;
  return true;
}

std::vector<int> RankMesh::intra_node_group(int rank) const {
  check_rank(rank);
  return topology_.ranks_on_node(topology_.node_of(rank));
}

std::vector<int> RankMesh::inter_node_group(int rank) const {
  check_rank(rank);
  const int lr = topology_.local_rank(rank);
  std::vector<int> g;
  for (int r = 0; r < world_size(); ++r)
    if (topology_.local_rank(r) == lr) g.push_back(r);
  return g;
}

RankGroups RankMesh::intra_node_groups() const {
  RankGroups out;
  for (int n = 0; n < topology_.num_nodes(); ++n) out.push_back(topology_.ranks_on_node(n));
  return out;
}

RankGroups RankMesh::inter_node_groups() const {
  RankGroups out;
  for (int r = 0; r < world_size(); ++r) {
    const auto lr = static_cast<std::size_t>(topology_.local_rank(r));
    if (out.size() <= lr) out.resize(lr + 1);
    out[lr].push_back(r);
  }
  return out;
}

std::string RankMesh::describe() const {
  std::ostringstream os;
  os << "topology: " << topology_.describe();
  os << "mesh: " << format_mesh_axes(axes_) << " (outermost first; the last axis varies fastest)\n";
  os << "  rank  node  local";
  for (const auto& a : axes_) os << "  " << a.name;
  os << '\n';
  for (int r = 0; r < world_size(); ++r) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "  %4d  %4d  %5d", r, topology_.node_of(r), topology_.local_rank(r));
    os << buf;
    const auto c = coord(r);
    for (int i = 0; i < ndim(); ++i) {
      const std::string v = std::to_string(c[i]);
      os << "  " << std::string(axes_[i].name.size() > v.size() ? axes_[i].name.size() - v.size() : 0, ' ') << v;
    }
    os << '\n';
  }
  for (int i = 0; i < ndim(); ++i) {
    const auto& a = axes_[i];
    os << "axis " << a.name << ": size " << a.size << ", stride " << stride_[i] << ", "
       << num_groups(a.name) << (num_groups(a.name) == 1 ? " group, " : " groups, ")
       << (within_node(a.name) ? "inside nodes" : "crossing nodes") << '\n';
    print_groups(os, groups(a.name));
  }
  const auto intra = intra_node_groups();
  const auto inter = inter_node_groups();
  os << "intra-node: " << intra.size() << (intra.size() == 1 ? " group\n" : " groups\n");
  print_groups(os, intra);
  os << "inter-node (same local rank on every node): " << inter.size()
     << (inter.size() == 1 ? " group\n" : " groups\n");
  print_groups(os, inter);
  return os.str();
}

RankGroups contiguous_groups(int world_size, int group_size) {
  if (world_size < 1 || group_size < 1 || world_size % group_size != 0)
    HZP_THROW(ConfigError, "group size ", group_size, " must be at least 1 and divide the world size ",
              world_size);
  RankGroups out(static_cast<std::size_t>(world_size / group_size));
  for (int r = 0; r < world_size; ++r) out[r / group_size].push_back(r);
  return out;
}

RankGroups strided_groups(int world_size, int group_size) {
  if (world_size < 1 || group_size < 1 || world_size % group_size != 0)
    HZP_THROW(ConfigError, "group size ", group_size, " must be at least 1 and divide the world size ",
              world_size);
  RankGroups out(static_cast<std::size_t>(group_size));
  for (int r = 0; r < world_size; ++r) out[r % group_size].push_back(r);
  return out;
}

}  // namespace hzp::coll
