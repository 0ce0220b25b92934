// Rank 0's results thread: the one thread that makes HDF5 calls (it creates, writes, flushes and closes
// the results file; HDF5 is not built thread-safe here) and the one that listens for failure reports from
// other ranks.
// The run loop hands it jobs through a bounded queue. Because it never waits in a collective, a failure on
// any rank reaches the file (`failed: <rank>: <reason>`) even while rank 0's main thread is blocked in a
// collective with the failed rank; it then aborts the job.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "failure.hpp"
#include "hzp/harness/results_file.hpp"

namespace hzp::harness {

class ResultsThread {
 public:
  using Job = std::function<void(ResultsWriter&)>;

  /// Starts the thread, which creates `path` (ResultsWriter::create). Blocks until the file exists and
  /// rethrows the error when it could not be created. `control` (rank 0's end of the control channel,
  /// may be null at one rank) must outlive the thread. Between jobs the thread flushes what they wrote
  /// once `flush_s` passed since the last flush (output.flush_s), so a slow step never holds rows back.
  ResultsThread(std::filesystem::path path, RunInfo info, bool force, ControlChannel* control, double flush_s);
  /// Stops the thread without finishing the file (it stays at `running`, as after a kill). Never throws.
  ~ResultsThread();
  ResultsThread(const ResultsThread&) = delete;
  ResultsThread& operator=(const ResultsThread&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

  /// Queues `job` to run on the results thread after the earlier ones; blocks while 64 jobs are queued
  /// (the writer is then behind, and the run loop waits rather than grow memory without bound).
  void post(Job job);
  /// Waits until every queued job ran; rethrows the first error a job raised.
  void drain();
  /// Writes the final status, closes the file and joins the thread; rethrows a job's error.
  void finish(const RunStatus& status);
  /// Records a failure of rank 0 (its main thread's error or its watchdog): the status becomes
  /// `failed: <rank>: <reason>` and is flushed; then, with `abort_job`, the thread aborts the job
  /// (MPI_Abort with the report's exit code). Without it, the call waits for the status to be written,
  /// joins the thread and returns (one rank: main then exits with the code).
  void report_failure(const FailureReport& report, bool abort_job);
  /// Whether the thread itself reported a failure (a write to the file failed): the main thread then
  /// stops without printing the same error again.
  bool reported_own_failure() const;

 private:
  void loop(RunInfo info, bool force);
  void run_jobs();
  void handle_failure(FailureReport report, bool abort);
  std::optional<FailureReport> collect_better_reports(FailureReport first);
  /// From inside a catch: the current exception (a job's or a flush's) as a failure of rank 0, handled at
  /// once; returns whether the job was aborted (several ranks) rather than left to the main thread.
  bool writer_failed();

  std::filesystem::path path_;
  ControlChannel* control_;
  double flush_s_;
  bool dirty_ = false;  // results thread only: jobs wrote since the last flush
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::size_t running_jobs_ = 0;
  bool stop_ = false;
  std::optional<RunStatus> finish_status_;
  std::optional<std::pair<FailureReport, bool>> local_failure_;
  bool failure_written_ = false;
  bool created_ = false;
  bool exited_ = false;  // the thread's loop returned: nothing more is written
  bool own_failure_ = false;  // writer_failed() ran
  std::exception_ptr error_;  // creation or a job's error, for the main thread
  std::optional<ResultsWriter> writer_;
};

}  // namespace hzp::harness
