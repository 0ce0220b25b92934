// MPI discovery of the machine's nodes: shared-memory split for node membership, host names for
// printing. Two collectives (split + allgather); called once per run, never on a hot path.
#include "hzp/collectives/topology_mpi.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::coll {
namespace {

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    HZP_THROW(MpiError, what, " failed: ", std::string(text, static_cast<std::size_t>(len)));
  }
}

}  // namespace

Topology discover_machine_topology(MPI_Comm comm) {
  int rank = 0, size = 0;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");

  // The lowest rank of each shared-memory group identifies its node: the key is the same on every
  // member and distinct between nodes, whatever order the launcher placed ranks in.
  MPI_Comm shm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  int leader = rank;
  const int rc = MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, shm);
  MPI_Comm_free(&shm);
  mpi_check(rc, "MPI_Allreduce(node leader)");

  std::vector<int> leaders(static_cast<std::size_t>(size));
  mpi_check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm),
            "MPI_Allgather(node leaders)");

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int name_len = 0;
  mpi_check(MPI_Get_processor_name(name, &name_len), "MPI_Get_processor_name");
  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                          MPI_CHAR, comm),
            "MPI_Allgather(host names)");

  Topology t = Topology::from_node_map(leaders, rank, TopologySource::machine);
  std::vector<std::string> node_names;
  for (int n = 0; n < t.num_nodes(); ++n) {
    const char* p = names.data() + static_cast<std::size_t>(t.ranks_on_node(n).front()) * MPI_MAX_PROCESSOR_NAME;
    node_names.emplace_back(p, strnlen(p, MPI_MAX_PROCESSOR_NAME));
  }
  t.set_node_names(std::move(node_names));
  return t;
}

Topology discover_topology(MPI_Comm comm, int ranks_per_node) {
  return Topology::with_ranks_per_node(discover_machine_topology(comm), ranks_per_node);
}

}  // namespace hzp::coll
