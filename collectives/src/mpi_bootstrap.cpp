// MpiBootstrap (mpi_bootstrap.hpp).
#include "hzp/collectives/mpi_bootstrap.hpp"

#include <limits>

#include "mpi_check.hpp"

namespace hzp::coll {

MpiBootstrap::MpiBootstrap(MPI_Comm comm) : comm_(comm) {
  HZP_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  HZP_MPI_CHECK(MPI_Comm_size(comm, &size_));
}

void MpiBootstrap::broadcast(std::span<std::byte> data, int root) {
  HZP_CHECK(root >= 0 && root < size_, "bootstrap broadcast: root ", root, " outside [0, ", size_, ")");
  HZP_CHECK(data.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
            "bootstrap broadcast of ", data.size(), " bytes exceeds MPI's int count");
  HZP_MPI_CHECK(MPI_Bcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root, comm_));
}

}  // namespace hzp::coll
