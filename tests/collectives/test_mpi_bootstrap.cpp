// MpiBootstrap at 2 and 4 ranks: rank and size are the MPI communicator's, and a broadcast from any
// root leaves every rank with the root's bytes (what the NCCL communicator's unique id relies on).
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cstddef>

#include "hzp/collectives/mpi_bootstrap.hpp"
#include "hzp/core/error.hpp"
#include "mpi_test.hpp"

namespace hzp::coll {
namespace {

TEST(MpiBootstrap, BroadcastsTheRootsBytesToEveryRank) {
  MpiBootstrap b(MPI_COMM_WORLD);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(b.rank(), rank);
  EXPECT_EQ(b.size(), size);
  for (int root = 0; root < size; ++root) {
    std::array<std::byte, 128> id{};  // the size of ncclUniqueId
    for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(rank)) & 0xff);
    b.broadcast(id, root);
    for (std::size_t i = 0; i < id.size(); ++i)
      ASSERT_EQ(id[i], static_cast<std::byte>((i * 7 + static_cast<std::size_t>(root)) & 0xff)) << "root " << root;
  }
  EXPECT_THROW(b.broadcast({}, size), PreconditionError);
}

}  // namespace
}  // namespace hzp::coll
