// Sub-communicators for the groups of a RankMesh: one Communicator::split per group set, colour =
// the group's index, key = the rank's position in it, so that the new communicator's rank r is
// member r of the mesh group. Backend-neutral: works with any Communicator implementation.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/mesh.hpp"

namespace hzp::coll {

/// Collective over `parent`: the calling rank joins the group of `groups` that lists it (ranks are
/// `parent`'s ranks; groups must be disjoint). Returns nullptr when no group lists the calling rank.
/// Every rank must pass the same `groups`. Throws PreconditionError on overlapping groups or ranks
/// outside parent.
std::unique_ptr<Communicator> split_groups(Communicator& parent, const RankGroups& groups,
                                           std::string name, bool share_counters = true);

/// The communicator of the calling rank's group along `axis` (world = a communicator over the whole
/// mesh, world.rank() = mesh rank). `name` defaults to the axis name.
std::unique_ptr<Communicator> split_axis(Communicator& world, const RankMesh& mesh, std::string_view axis,
                                         std::string name = {}, bool share_counters = true);
/// The calling rank's intra-node group ("intra") and inter-node group ("inter") as communicators.
std::unique_ptr<Communicator> split_intra_node(Communicator& world, const RankMesh& mesh,
                                               std::string name = "intra", bool share_counters = true);
std::unique_ptr<Communicator> split_inter_node(Communicator& world, const RankMesh& mesh,
                                               std::string name = "inter", bool share_counters = true);

}  // namespace hzp::coll
