// The failure channel of `hzpbench run` under mpiexec: a failing rank's report reaches rank 0 while rank 0's
// main thread is blocked in a collective the failed rank has not joined (the case that would hang without
// it), and reports keep their fields across the wire. The run-level paths (status written, job aborted) are
// run_e2e_throw_np2 and run_e2e_stall_np2.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "failure.hpp"
#include "hzp/core/clock.hpp"
#include "mpi_test.hpp"

namespace hzp::harness {
namespace {

TEST(FailureChannel, ReportReachesRankZeroWhileItsMainThreadWaitsInACollective) {
  HZP_REQUIRE_MIN_RANKS(2);
  const int rank = test::world_rank(), size = test::world_size();
  ControlChannel channel(MPI_COMM_WORLD);
  MPI_Comm work = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &work);

  const int failing = size - 1;
  std::atomic<bool> received{false};
  std::optional<FailureReport> got;
  double received_at = 0;
  std::thread listener;
  if (rank == 0) {
    // Rank 0's results thread in miniature: polls the channel while main is in the barrier below.
    listener = std::thread([&] {
      const double until = wall_seconds() + test::default_deadline_s();
      while (!received && wall_seconds() < until) {
        if (auto r = channel.poll()) {
          got = *r;
          received_at = wall_seconds();
          received = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  if (rank == failing) {
    FailureReport r;
    r.rank = rank;
    r.exit_code = kExitFailed;
    r.kind = FailureReport::Kind::watchdog;
    r.last_progress_unix_s = 1234.5;
    r.message = "injected: rank " + std::to_string(rank) + " failed before the barrier";
    EXPECT_TRUE(channel.send(r, 10));
    EXPECT_FALSE(channel.send(r, 10)) << "only a rank's first report is sent";
    // The failed rank joins late, as if it had hung; rank 0 must have heard of it by then.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // The collective rank 0 is "blocked" in (polled so that the oversubscribed machine keeps moving).
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(work, &req);
  ASSERT_TRUE(test::wait_with_deadline(req, test::default_deadline_s()));
  const double barrier_done = wall_seconds();
  if (rank == 0) {
    listener.join();
    ASSERT_TRUE(received.load());
    EXPECT_LT(received_at, barrier_done) << "the report arrived while rank 0 was still in the collective";
    EXPECT_EQ(got->rank, failing);
    EXPECT_EQ(got->exit_code, kExitFailed);
    EXPECT_EQ(got->kind, FailureReport::Kind::watchdog);
    EXPECT_DOUBLE_EQ(got->last_progress_unix_s, 1234.5);
    EXPECT_EQ(got->message, "injected: rank " + std::to_string(failing) + " failed before the barrier");
    EXPECT_FALSE(channel.poll().has_value()) << "one report, received once";
  }
  MPI_Comm_free(&work);
  // Every rank is past its sends before the channel (and its posted receive) goes away.
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(FailureChannel, ReportsFromSeveralRanksAllArrive) {
  HZP_REQUIRE_MIN_RANKS(3);
  const int rank = test::world_rank(), size = test::world_size();
  ControlChannel channel(MPI_COMM_WORLD);
  if (rank != 0) {
    FailureReport r;
    r.rank = rank;
    r.message = std::string(5000, 'x');  // longer than the wire's text: truncated, not overflowed
    EXPECT_TRUE(channel.send(r, 10));
  } else {
    int seen = 0;
    const double until = wall_seconds() + test::default_deadline_s();
    while (seen < size - 1 && wall_seconds() < until) {
      if (auto r = channel.poll()) {
        ++seen;
        EXPECT_GT(r->rank, 0);
        EXPECT_GT(r->message.size(), 4000u);
        EXPECT_LT(r->message.size(), 5000u);
      }
    }
    EXPECT_EQ(seen, size - 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace hzp::harness
