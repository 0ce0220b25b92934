// The GoogleTest main of every MPI test binary (the pattern of kokkos-comm's and
// heffte's MPI test mains). Initialises MPI with MPI_THREAD_MULTIPLE, makes each test's verdict
// collective (a test fails on every rank when it fails on any), prints from rank 0 only (other
// ranks print just their own failed assertions, prefixed with their rank), and exits 77 when every
// test skipped so CTest shows a skip rather than a pass.
#include <mpi.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {
int g_rank = 0;
int g_size = 1;
// Set while CollectiveVerdict adds its "failed on rank(s)" note, which every passing rank adds:
// ranks other than 0 need not echo it.
bool g_adding_verdict = false;

[[noreturn]] void abort_job(const std::string& why) {
  std::fprintf(stderr, "[rank %d] %s; aborting the MPI job\n", g_rank, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; keeps [[noreturn]] honest
}
}  // namespace

int world_rank() { return g_rank; }
int world_size() { return g_size; }

double default_deadline_s() {
  static const double s = [] {
    const char* env = std::getenv("HZP_TEST_DEADLINE_S");
    const double v = env ? std::atof(env) : 0.0;
    return v > 0 ? v : 120.0;
  }();
  return s;
}

bool wait_with_deadline(MPI_Request& req, double timeout_s) {
  const double deadline = wall_seconds() + timeout_s;
  for (;;) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (wall_seconds() > deadline) return false;
    sched_yield();
  }
}

void run_then_barrier(const std::function<void()>& fn, double timeout_s, MPI_Comm comm,
                      const char* what) {
  try {
    fn();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw on rank " << g_rank << ": " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << " threw a non-std exception on rank " << g_rank;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &req);
  if (!wait_with_deadline(req, timeout_s)) {
    std::ostringstream os;
    os << "barrier after " << what << " did not complete within " << timeout_s
       << " s: a peer is hung or has crashed";
    abort_job(os.str());
  }
}

bool all_ranks(bool local, MPI_Comm comm) {
  int in = local ? 1 : 0;
  int out = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_LAND, comm, &req);
  if (!wait_with_deadline(req, default_deadline_s()))
    abort_job("all_ranks() agreement did not complete within the deadline");
  return out != 0;
}

namespace {

/// Makes each test's verdict collective. Appended after the printer: gtest fires OnTestEnd in
/// reverse order, so the failure added here is recorded before the printer reports the test.
class CollectiveVerdict : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const int pass = info.result()->Failed() ? 0 : 1;
    std::vector<int> flags(static_cast<std::size_t>(g_size), 0);
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Iallgather(&pass, 1, MPI_INT, flags.data(), 1, MPI_INT, MPI_COMM_WORLD, &req);
    if (!wait_with_deadline(req, default_deadline_s())) {
      abort_job(std::string("ranks did not agree on the verdict of ") + info.test_suite_name() + "." +
                info.name() + " within the deadline (a peer is still inside the test, hung?)");
    }
    std::ostringstream failed;
    int n_failed = 0;
    for (int r = 0; r < g_size; ++r) {
      if (flags[static_cast<std::size_t>(r)] == 0) {
        failed << (n_failed++ ? "," : "") << r;
      }
    }
    if (n_failed > 0 && pass) {
      g_adding_verdict = true;
      ADD_FAILURE() << "failed on rank(s) " << failed.str() << " of " << g_size
                    << " (their messages are printed with a [rank r] prefix)";
      g_adding_verdict = false;
    }
  }
};

/// Replaces the default printer on ranks other than 0: progress stays quiet, but an assertion
/// that fails here is printed with this rank's number, since rank 0 cannot print it.
class FailureOnlyPrinter : public ::testing::EmptyTestEventListener {
  // The name is remembered here because gtest holds its own mutex while it calls
  // OnTestPartResult, so UnitTest::current_test_info() would deadlock there.
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed() || g_adding_verdict) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: Failure\n%s\n", g_rank, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
  }
  std::string test_;
};

}  // namespace
}  // namespace hzp::test

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "MPI_Init_thread failed\n");
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &hzp::test::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &hzp::test::g_size);
  hzp::set_process_rank(hzp::test::g_rank);
  if (provided < MPI_THREAD_MULTIPLE) {
    // Background communication threads (asynchzp's) need it; every rank gets the same answer.
    if (hzp::test::g_rank == 0)
      std::fprintf(stderr, "MPI provides thread level %d, tests need MPI_THREAD_MULTIPLE (%d)\n",
                   provided, MPI_THREAD_MULTIPLE);
    MPI_Finalize();
    return 1;
  }

  ::testing::InitGoogleTest(&argc, argv);
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (hzp::test::g_rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    // One XML report per job, written by rank 0; others would overwrite it.
    delete listeners.Release(listeners.default_xml_generator());
    listeners.Append(new hzp::test::FailureOnlyPrinter);
  }
  listeners.Append(new hzp::test::CollectiveVerdict);

  int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  if (rc == 0 && ut.test_to_run_count() > 0 && ut.skipped_test_count() == ut.test_to_run_count()) {
    rc = 77;  // every test skipped: CTest's SKIP_RETURN_CODE (hzp_add_mpi_test sets it)
  }
  MPI_Finalize();
  return rc;
}
