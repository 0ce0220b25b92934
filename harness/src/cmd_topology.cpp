// `hzpbench topology`: prints the ranks, (virtual) nodes and the groups of a rank mesh for any world
// size, without MPI, so a layout can be checked before a job is submitted. World size and ranks per
// node come from the option table (topology.world_size, topology.ranks_per_node, or Slurm's variables
// when those are 0); the mesh from --mesh. docs/topology.md explains the layout rules.
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "hzp/collectives/mesh.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

// Without MPI the only sources of a node map are the configuration and Slurm: a world size of 0
// ("from MPI") has nothing to come from here, so it must be given or found in Slurm's variables.
coll::Topology topology_from_config(const ResolvedConfig& cfg, std::string& origin) {
  const auto world = cfg.get_int32("topology.world_size");
  const auto rpn = cfg.get_int32("topology.ranks_per_node");
  std::optional<coll::Topology> slurm = coll::Topology::from_slurm_env();
  if (world == 0 && !slurm)
    HZP_THROW(ConfigError,
              "topology.world_size = 0 means 'from MPI', but `hzpbench topology` runs without MPI and "
              "no Slurm allocation was found; give it, e.g. --set topology.world_size=8");
  if (world == 0) {
    origin = "world size and nodes from Slurm";
    return coll::Topology::with_ranks_per_node(*slurm, rpn);
  }
  if (slurm && slurm->world_size() == world && rpn == 0) {
    origin = "nodes from Slurm";
    return *slurm;
  }
  if (rpn == 0) {
    // No node information at all: one machine, which is what mpiexec on this host would give.
    origin = "topology.ranks_per_node = 0: every rank on one node, as mpiexec on one machine gives";
    return coll::Topology::virtual_nodes(world, world);
  }
  origin = "virtual nodes from topology.ranks_per_node";
  return coll::Topology::virtual_nodes(world, rpn);
}

}  // namespace

Command add_topology_command(CLI::App& app) {
  struct Args {
    ConfigArgs config;
    std::string mesh;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "topology", "Print ranks, (virtual) nodes and the groups of a rank mesh, without MPI");
  add_config_options(*sub, args->config);
  sub->add_option("--mesh", args->mesh,
                  "Mesh axes, outermost first, the last varying fastest: name=size[,name=size...]; "
                  "one size may be -1 (inferred); name=size@node demands its groups stay inside a "
                  "node. Default: one axis 'world' holding every rank")
      ->type_name("AXES");
  sub->footer(
      "Example: hzpbench topology --set topology.world_size=8 --set topology.ranks_per_node=2 "
      "--mesh replica=2,shard=4\n");

  return {sub, [args] {
            const ResolvedConfig cfg = args->config.resolve();
            std::string origin;
            coll::Topology topo = topology_from_config(cfg, origin);
            const std::string spec = args->mesh.empty() ? "world=-1" : args->mesh;
            const coll::RankMesh mesh(std::move(topo), coll::parse_mesh_axes(spec));
            std::cout << "# " << origin << '\n' << mesh.describe();
            return 0;
          }};
}

}  // namespace hzp::harness
