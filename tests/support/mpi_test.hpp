// MPI-aware GoogleTest support for tests that run under mpiexec: rank/size queries,
// skip macros that name the reason, and deadline-protected waits so a hung peer fails the test
// instead of hanging CTest. The matching main (mpi_test_main.cpp) makes every test's verdict
// collective and prints from rank 0 only. Link `hzp_mpi_test_main`, not GTest::gtest_main.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

#include <gtest/gtest.h>

namespace hzp::test {

/// Rank and size of MPI_COMM_WORLD (valid after the test main's MPI_Init_thread).
int world_rank();
int world_size();

/// Default deadline (s) of the test-support waits; HZP_TEST_DEADLINE_S overrides it (default 60).
double default_deadline_s();

/// Completes `req` by polling MPI_Test + sched_yield (a blocking MPI wait busy-polls and starves
/// peers on an oversubscribed machine, docs/environment.md). Returns false when `timeout_s` passed first;
/// the request is then still pending and must not be freed by the caller.
bool wait_with_deadline(MPI_Request& req, double timeout_s);

/// Runs `fn` on this rank, then joins every rank of `comm` in a barrier that must complete within
/// `timeout_s`. An exception escaping `fn` is recorded as a test failure on this rank (the barrier
/// still runs, so peers are not left waiting for us). A barrier that misses its deadline means a
/// peer is hung or crashed: the helper prints which and calls MPI_Abort, since no collective after
/// that point can complete (this is test code: library code never aborts).
void run_then_barrier(const std::function<void()>& fn, double timeout_s = default_deadline_s(),
                      MPI_Comm comm = MPI_COMM_WORLD, const char* what = "test body");

/// True on every rank when `local` is true on every rank (deadline-protected MPI_Iallreduce(LAND)).
bool all_ranks(bool local, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace hzp::test

/// Skip (visibly, with the reason) unless the world has exactly / at least / a multiple of n ranks.
/// World size is the same on every rank, so every rank skips together.
#define HZP_REQUIRE_RANKS(n)                                                                  \
  do {                                                                                        \
    if (::hzp::test::world_size() != (n))                                                     \
      GTEST_SKIP() << "needs exactly " << (n) << " ranks, running with "                      \
                   << ::hzp::test::world_size();                                              \
  } while (0)
#define HZP_REQUIRE_MIN_RANKS(n)                                                              \
  do {                                                                                        \
    if (::hzp::test::world_size() < (n))                                                      \
      GTEST_SKIP() << "needs at least " << (n) << " ranks, running with "                     \
                   << ::hzp::test::world_size();                                              \
  } while (0)
#define HZP_REQUIRE_RANKS_DIVISIBLE_BY(n)                                                     \
  do {                                                                                        \
    if (::hzp::test::world_size() % (n) != 0)                                                 \
      GTEST_SKIP() << "needs a rank count divisible by " << (n) << ", running with "          \
                   << ::hzp::test::world_size();                                              \
  } while (0)
