// Topology discovery from the running MPI job: the node of every rank from the MPI shared-memory
// split (MPI_COMM_TYPE_SHARED: ranks that can share memory are on one node), named by host name.
// Kept out of topology.hpp so that planning tools can use Topology without MPI.
#pragma once

#include <mpi.h>

#include "hzp/collectives/topology.hpp"

namespace hzp::coll {

/// Collective over `comm`: every rank learns the node of every rank. Nodes are numbered in order of
/// their lowest rank; node_names() holds each node's host name. Blocks until all ranks of `comm`
/// have called it; throws MpiError on an MPI failure.
Topology discover_machine_topology(MPI_Comm comm);

/// discover_machine_topology, then topology.ranks_per_node applied (Topology::with_ranks_per_node):
/// 0 keeps the machine's nodes, a positive value makes virtual nodes inside them.
Topology discover_topology(MPI_Comm comm, int ranks_per_node);

}  // namespace hzp::coll
