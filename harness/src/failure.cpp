// Failure reports and the control channel (failure.hpp). A report travels as one fixed-size MPI_BYTE
// message, so rank 0 keeps exactly one receive posted and never needs to probe for sizes.
#include "failure.hpp"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

constexpr int kReportTag = 1;
constexpr std::size_t kTextBytes = 4064;

void sleep_ms(int ms) {
  timespec ts{0, ms * 1'000'000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

struct ControlChannel::Wire {
  std::int32_t rank = -1;
  std::int32_t exit_code = kExitFailed;
  std::int32_t kind = 0;
  std::int32_t waiting_on_peers = 0;
  double last_progress_unix_s = 0;
  char text[kTextBytes] = {};
};

int exit_code_for(const std::exception& e) noexcept {
  if (const auto* he = dynamic_cast<const Error*>(&e))
    if (he->code() == ErrorCode::config || he->code() == ErrorCode::data) return kExitBadInput;
  return kExitFailed;
}

std::string failure_message(const std::exception& e) {
  if (const auto* he = dynamic_cast<const Error*>(&e)) return he->message();
  return e.what();
}

FailureReport FailureReport::from_exception(int rank, const std::exception& e, double last_progress_unix_s) {
  FailureReport r;
  r.rank = rank;
  r.exit_code = exit_code_for(e);
  const auto* he = dynamic_cast<const Error*>(&e);
  r.kind = he != nullptr && he->code() == ErrorCode::timeout ? Kind::timeout : Kind::error;
  r.last_progress_unix_s = last_progress_unix_s;
  r.message = failure_message(e);
  return r;
}

bool FailureReport::better_than(const FailureReport& other) const noexcept {
  const auto decisive = [](Kind k) { return k == Kind::error || k == Kind::signal; };
  if (decisive(kind) && !decisive(other.kind)) return true;
  if (kind == Kind::watchdog && other.kind == Kind::watchdog) {
    // Last-progress times alone cannot order ranks that stopped within a few microseconds of each
    // other (the stalled rank and its peers entering their next collective): waiting decides first.
    if (waiting_on_peers != other.waiting_on_peers) return !waiting_on_peers;
    return last_progress_unix_s < other.last_progress_unix_s;
  }
  if (kind == Kind::watchdog && other.kind == Kind::timeout) return true;  // the stall, not its echo
  return false;
}

ControlChannel::ControlChannel(MPI_Comm world) : inbox_(std::make_unique<Wire>()) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  if (rank_ == 0 && size_ > 1)
    MPI_Irecv(inbox_.get(), sizeof(Wire), MPI_BYTE, MPI_ANY_SOURCE, kReportTag, comm_, &recv_);
}

ControlChannel::~ControlChannel() {
  if (recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&recv_);
    MPI_Wait(&recv_, MPI_STATUS_IGNORE);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

bool ControlChannel::send(const FailureReport& report, double timeout_s) {
  std::lock_guard<std::mutex> lock(send_mu_);
  if (sent_ || rank_ == 0 || size_ <= 1) return false;
  sent_ = true;
  // On the heap: an unfinished send is left posted (below), and its buffer must outlive this call.
  auto w = std::make_unique<Wire>();
  w->rank = report.rank;
  w->exit_code = report.exit_code;
  w->kind = static_cast<std::int32_t>(report.kind);
  w->last_progress_unix_s = report.last_progress_unix_s;
  w->waiting_on_peers = report.waiting_on_peers ? 1 : 0;
  std::strncpy(w->text, report.message.c_str(), kTextBytes - 1);
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Isend(w.get(), sizeof(Wire), MPI_BYTE, 0, kReportTag, comm_, &req);
  // Polled with sleeps, not MPI_Wait: a blocking MPI wait busy-polls a core rank 0 may need.
  const double deadline = wall_seconds() + timeout_s;
  int done = 0;
  while (!done && wall_seconds() < deadline) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) sleep_ms(1);
  }
  // Not delivered in time: the job is about to be aborted; the buffer is leaked rather than freed under
  // a send that may still read it.
  if (!done) (void)w.release();
  return done != 0;
}

std::optional<FailureReport> ControlChannel::poll() {
  if (recv_ == MPI_REQUEST_NULL) return std::nullopt;
  int done = 0;
  MPI_Test(&recv_, &done, MPI_STATUS_IGNORE);
  if (!done) return std::nullopt;
  FailureReport r;
  r.rank = inbox_->rank;
  r.exit_code = inbox_->exit_code;
  r.kind = static_cast<FailureReport::Kind>(std::clamp(inbox_->kind, 0, 3));
  r.last_progress_unix_s = inbox_->last_progress_unix_s;
  r.waiting_on_peers = inbox_->waiting_on_peers != 0;
  inbox_->text[kTextBytes - 1] = '\0';
  r.message = inbox_->text;
  MPI_Irecv(inbox_.get(), sizeof(Wire), MPI_BYTE, MPI_ANY_SOURCE, kReportTag, comm_, &recv_);
  return r;
}

void abort_job(int code) noexcept {
  std::fflush(stdout);
  std::fflush(stderr);
  int inited = 0, finalized = 0, size = 1;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Alone, there is no peer to stop: MPICH's singleton abort calls exit(), whose exit handlers (OpenBLAS frees
  // its buffers) race the compute thread still in a GEMM and can turn exit 143 into a segfault (seen in
  // one run of the test suite, results_sigterm_np1). _Exit runs no handlers; the results file is closed
  // before this is called.
  if (inited && !finalized && size > 1) {
    // MPI_Abort has the launcher kill every rank, and MPICH's hydra can drop what a rank wrote just before (the
    // lines saying where the results went were missing in 1 of 5 runs of results_force_failing_np2): give its
    // forwarding a moment to drain the pipes first.
    timespec drain{0, 200'000'000};
    nanosleep(&drain, nullptr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

}  // namespace hzp::harness
