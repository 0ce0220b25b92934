// Bootstrap: rank discovery and the exchange of a few setup bytes (NCCL's unique id) between the
// processes of a group, injected into the NCCL communicator so that the NCCL backend itself does not
// depend on MPI (docs/architecture.md, Communicator). MpiBootstrap (mpi_bootstrap.hpp) is the
// implementation over an MPI communicator; a TCP or file bootstrap would be another.
#pragma once

#include <cstddef>
#include <span>

namespace hzp::coll {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Collective: every rank's `data` becomes root's (same size on every rank). Blocking.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
};

/// A group of one process: rank 0 of 1, nothing to exchange (a one-rank NCCL communicator without MPI: the GPU
/// tests and benchmarks).
class SelfBootstrap final : public Bootstrap {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  void broadcast(std::span<std::byte>, int) override {}
};

}  // namespace hzp::coll
