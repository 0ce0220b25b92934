// MpiBootstrap: the Bootstrap over an MPI communicator (MPI_Bcast), for the NCCL communicator's setup.
#pragma once

#include <mpi.h>

#include "hzp/collectives/bootstrap.hpp"

namespace hzp::coll {

/// Uses `comm` (not owned; it must outlive the bootstrap) from one thread at a time.
class MpiBootstrap final : public Bootstrap {
 public:
  explicit MpiBootstrap(MPI_Comm comm);
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  void broadcast(std::span<std::byte> data, int root) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hzp::coll
