// Rank 0's results thread (results_thread.hpp): a job queue drained by one thread that owns the
// ResultsWriter, and the failure path: queued rows first, then the failed status, flushed, then abort.
#include "results_thread.hpp"

#include <chrono>
#include <cstdio>

#include "h5_handle.hpp"
#include "hzp/core/clock.hpp"

namespace hzp::harness {
namespace {
constexpr std::size_t kMaxQueued = 64;
// After a timeout or watchdog report, other ranks' reports are awaited this long: the rank that really
// failed usually reports within milliseconds, and its report explains more than the echo.
constexpr double kGraceS = 1.0;
}  // namespace

ResultsThread::ResultsThread(std::filesystem::path path, RunInfo info, bool force, ControlChannel* control,
                             double flush_s)
    : path_(std::move(path)), control_(control), flush_s_(flush_s) {
  thread_ = std::thread([this, info = std::move(info), force]() mutable { loop(std::move(info), force); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return created_ || error_ != nullptr; });
  if (!created_) {
    const std::exception_ptr e = error_;
    lock.unlock();
    thread_.join();
    std::rethrow_exception(e);
  }
}

ResultsThread::~ResultsThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ResultsThread::post(Job job) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.size() < kMaxQueued || stop_ || exited_ || error_; });
  // The file could not be written (and is marked failed where that was still possible): the run stops at
  // its next row instead of computing on with nowhere to put the results.
  if (error_) std::rethrow_exception(error_);
  queue_.push_back(std::move(job));
  lock.unlock();
  cv_.notify_all();
}

void ResultsThread::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (queue_.empty() && running_jobs_ == 0) || stop_ || exited_; });
  if (error_) std::rethrow_exception(error_);
}

void ResultsThread::finish(const RunStatus& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finish_status_ = status;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void ResultsThread::report_failure(const FailureReport& report, bool abort) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    local_failure_ = std::make_pair(report, abort);
  }
  cv_.notify_all();
  if (!abort && thread_.joinable()) thread_.join();
}

bool ResultsThread::reported_own_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return own_failure_;
}

namespace {

// This thread's HDF5 calls wait while the main thread is inside a checkpoint (h5_handle.hpp, calls_mutex). The
// failure path waits at most a few seconds: past that the main thread is stuck in a collective checkpoint write
// with the failed rank, the job is about to be aborted, and the status is written regardless.
std::unique_lock<std::timed_mutex> hdf5_turn() { return std::unique_lock<std::timed_mutex>(h5::calls_mutex()); }
std::unique_lock<std::timed_mutex> hdf5_turn_on_failure() {
  std::unique_lock<std::timed_mutex> lock(h5::calls_mutex(), std::defer_lock);
  (void)lock.try_lock_for(std::chrono::seconds(5));
  return lock;
}

}  // namespace

void ResultsThread::loop(RunInfo info, bool force) {
  try {
    const auto turn = hdf5_turn();
    writer_.emplace(ResultsWriter::create(path_, info, force));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    created_ = true;
  }
  cv_.notify_all();
  run_jobs();
  // Closed here: the writer's destructor makes HDF5 calls, which belong to this thread alone.
  {
    const auto turn = hdf5_turn_on_failure();
    writer_.reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_ = true;
  }
  cv_.notify_all();
}

bool ResultsThread::writer_failed() {
  FailureReport rep;
  try {
    throw;
  } catch (const std::exception& e) {
    rep = FailureReport::from_exception(0, e, wall_seconds());
    rep.exit_code = kExitFailed;  // the run's own file failed it, not its input
  } catch (...) {
    rep.rank = 0;
    rep.message = "unknown error writing the results file";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
    own_failure_ = true;
  }
  cv_.notify_all();
  const bool abort = control_ != nullptr && control_->size() > 1;
  handle_failure(rep, abort);
  return abort;
}

void ResultsThread::run_jobs() {
  for (;;) {
    Job job;
    std::optional<std::pair<FailureReport, bool>> local;
    std::optional<RunStatus> fin;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wakes for work, or every 20 ms to look for failure reports from other ranks.
      cv_.wait_for(lock, std::chrono::milliseconds(20),
                   [this] { return !queue_.empty() || stop_ || local_failure_ || finish_status_; });
      // Rows already produced go to the file before any verdict.
      if (!queue_.empty()) {
        job = std::move(queue_.front());
        queue_.pop_front();
        ++running_jobs_;
      } else if (local_failure_) {
        local = std::move(local_failure_);
        local_failure_.reset();
      } else if (finish_status_) {
        fin = finish_status_;
      } else if (stop_) {
        return;
      }
    }
    cv_.notify_all();
    // A write that fails (a full disk, a replaced file, an HDF5 error) ends the run at once as a failure of
    // rank 0, with the status written where the file still takes it; the main thread learns of it at its
    // next post() (one rank) or the job is aborted (several).
    bool write_failed = false;
    if (job) {
      try {
        const auto turn = hdf5_turn();
        if (!failure_written_) job(*writer_);
      } catch (...) {
        write_failed = true;
        writer_failed();
      }
      dirty_ = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        --running_jobs_;
      }
      cv_.notify_all();
    } else if (dirty_ && !failure_written_ && !fin) {
      try {
        const auto turn = hdf5_turn();
        if (writer_->flush_if_due(flush_s_)) dirty_ = false;
      } catch (...) {
        write_failed = true;
        writer_failed();
      }
    }
    if (write_failed) return;  // one rank: the status is written, the main thread stops at its next post()
    if (local) {
      handle_failure(local->first, local->second);
      if (!local->second) return;  // one rank: main joins and exits with the report's code
    }
    if (fin) {
      try {
        const auto turn = hdf5_turn();
        if (!failure_written_) writer_->finish(*fin);
      } catch (...) {
        writer_failed();
      }
      return;
    }
    if (control_ != nullptr)
      if (std::optional<FailureReport> r = control_->poll()) handle_failure(*r, true);
  }
}

std::optional<FailureReport> ResultsThread::collect_better_reports(FailureReport best) {
  const auto decisive = [](const FailureReport& r) {
    return r.kind == FailureReport::Kind::error || r.kind == FailureReport::Kind::signal;
  };
  if (decisive(best) || control_ == nullptr) return best;
  const double until = wall_seconds() + kGraceS;
  while (wall_seconds() < until) {
    if (std::optional<FailureReport> r = control_->poll()) {
      if (r->better_than(best)) best = *r;
      if (decisive(best)) break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return best;
}

void ResultsThread::handle_failure(FailureReport report, bool abort) {
  if (failure_written_) return;
  const auto turn = hdf5_turn_on_failure();
  // Rows queued before the failure still belong in the file.
  for (;;) {
    Job job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job(*writer_);
    } catch (...) {
      break;
    }
  }
  report = *collect_better_reports(std::move(report));
  std::fprintf(stderr, "hzpbench: failed: rank %d: %s\n", report.rank, report.message.c_str());
  const std::string written =
      writer_->displaced_copy().empty() ? writer_->path().string() : writer_->displaced_copy().string();
  try {
    // finish(), not set_status(): the file is closed, and its lock released, before the job is aborted,
    // so that whoever reads it next (a test, the next job of a sweep) does not find it still locked.
    if (!writer_->finished()) writer_->finish(RunStatus::failed(report.rank, report.message));
    std::fprintf(stderr, "hzpbench: results file %s marked failed\n", written.c_str());
    if (written != path_.string())
      std::fprintf(stderr, "hzpbench: the results file it was to replace, %s, is kept unchanged\n", path_.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hzpbench: could not mark %s failed: %s\n", written.c_str(), e.what());
  }
  failure_written_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.clear();
  }
  cv_.notify_all();
  if (abort) abort_job(report.exit_code);
}

}  // namespace hzp::harness
