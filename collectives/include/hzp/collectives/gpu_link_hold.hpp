// The GPU link-emulation primitive (docs/cuda.md, "Link emulation on the GPU"): a stream held for a modelled
// duration by two host functions, without occupying any SM. Used by the NCCL communicator around each NCCL call and
// by a phantom world's calls on device buffers (docs/phantom.md, "On the GPU").
#pragma once

#include <functional>

#include "hzp/core/stream.hpp"

namespace hzp::coll {

/// start() enqueues a host function stamping when the stream reaches it; finish() enqueues one that sleeps until
/// the hold's ready time + modelled_s. The ready time is the stamp, or what `ready_at(stamp)` returns: a phantom
/// world books its links there, at the moment the stream reaches the call, as the host form books at its join.
/// Work enqueued between them (the real transfer, or a phantom's stand-in copies) counts toward the modelled time.
/// Host functions run on the CUDA runtime's callback thread, in order, so a hold also delays other streams' host
/// functions (never their kernels or copies), and `ready_at` must not call CUDA. The object must live until the
/// stream has passed finish() (the requests keep theirs).
class GpuLinkHold {
 public:
  void start(StreamRef s, std::function<double(double stamp_s)> ready_at = {});
  void finish(StreamRef s, double modelled_s);
  /// After the stream has passed finish(): seconds actually slept, and the stamp.
  double slept_s() const noexcept { return slept_s_; }
  double start_s() const noexcept { return start_s_; }

 private:
  static void stamp(void* self);
  static void sleep(void* self);
  std::function<double(double)> ready_at_;
  double start_s_ = 0;
  double ready_s_ = 0;
  double modelled_s_ = 0;
  double slept_s_ = 0;
};

}  // namespace hzp::coll
