// StreamOrderedRequests: the keeper of collectives issued on a compute stream. On a CUDA stream a started request is
// kept and completed later, in one place, once per step; on the host it is waited for at once. It sits in the
// collectives layer so that both the engines (schedulers) and the model's own collectives (workloads: tensor
// parallelism, its vocabulary-parallel ends and sequence parallelism's gathers and scatters) can keep their requests
// (docs/cuda.md, "Data-parallel engines on the GPU" and "nd").
#pragma once

#include <cstddef>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/stream.hpp"

namespace hzp::coll {

/// Why keeping is safe on a CUDA stream: the NCCL backend (and a phantom world's device stand-in) has already
/// ordered the stream after the collective, so every later user of its buffers, on that stream, runs after it; a
/// buffer freed back to the caching allocator meanwhile is handed out only to work on the same stream (the
/// allocator is single-stream). Why the host waits at once: the MPI backend moves host buffers only inside its
/// waits, and the next kernel reads the result. One thread at a time, as the communicators it serves.
class StreamOrderedRequests {
 public:
  /// at_once: each request is waited for as it is settled. kept: held until complete(). The stream decides
  /// unless told (tests keep requests on the host stream to check the kept path without a device).
  enum class Completion { at_once, kept };

  explicit StreamOrderedRequests(StreamRef s = StreamRef::host())
      : StreamOrderedRequests(s, s.device().is_cpu() ? Completion::at_once : Completion::kept) {}
  StreamOrderedRequests(StreamRef s, Completion c) : stream_(s), completion_(c) {}
  /// Requests still kept are waited for, each under its own deadline (never abandoned: a transfer could still be
  /// writing a buffer the allocator hands out next); a failure is logged on stderr, never thrown (Request's
  /// destructor). Call complete() to see failures as exceptions.
  ~StreamOrderedRequests() = default;
  StreamOrderedRequests(StreamOrderedRequests&&) noexcept = default;
  StreamOrderedRequests& operator=(StreamOrderedRequests&&) noexcept = default;
  StreamOrderedRequests(const StreamOrderedRequests&) = delete;
  StreamOrderedRequests& operator=(const StreamOrderedRequests&) = delete;

  StreamRef stream() const noexcept { return stream_; }
  Completion completion() const noexcept { return completion_; }
  /// Waits for `r` now (at_once) or keeps it until complete() (kept).
  void settle(Request r);
  /// Completes every kept request: the host waits for the stream first (so the device's compute before the
  /// collectives is not counted as their wait), then for each request in the order kept, under each one's deadline
  /// (collectives.timeout_s), recording their counters. The first failure (TimeoutError, a backend error) is
  /// thrown after the keeper has let go of every request: the ones not yet waited are waited by their destructors
  /// (failures logged). The keeper is empty afterwards either way.
  void complete();
  /// Requests kept and not yet completed.
  std::size_t kept() const noexcept { return kept_.size(); }

 private:
  StreamRef stream_;
  Completion completion_;
  std::vector<Request> kept_;
};

}  // namespace hzp::coll
