// What lets one parameter engine run over host memory or one GPU's memory without two code paths: buffers
// zeroed on the engine's stream, views at an element offset that carry the buffer's device, copies of device
// state back to the host for the debugging accessors, and scratch held until a stream has passed its last use
// (docs/cuda.md, "Data-parallel engines on the GPU"). Stream-ordered completion of collectives is the collectives
// layer's StreamOrderedRequests (hzp/collectives/stream_ordered_requests.hpp), which the model uses too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::schedulers {

/// `n` elements of `t` from `alloc` under `tag`, set to zero on `s` (a memset on the host stream).
Allocation zeroed_on(CachingAllocator& alloc, std::int64_t n, DType t, AllocationTag tag, StreamRef s);
/// Elements [offset, offset + n) of `a` as `t`, on `device` (the allocator's).
TensorView view_at(const Allocation& a, DType t, std::int64_t offset, std::int64_t n, Device device);
/// `v`'s elements copied to host memory (synchronises `s` when `v` is device memory); a host `v` is copied too,
/// so the caller always owns what it reads.
std::vector<std::byte> host_copy(ConstTensorView v, StreamRef s);
/// host_copy as fp32 values (an fp32 view only).
std::vector<float> host_floats(ConstTensorView v, StreamRef s);

/// Allocations whose last use is queued on a stream other than the one the caching allocator's later users
/// are ordered on (asynchzp's background streams on a GPU): the allocator knows no streams, so a block freed
/// while such work is queued could be handed out and overwritten before that work has run. keep() holds the
/// allocation until the stream has passed the work enqueued on it so far (an event), and frees it then. On the
/// host stream the work has already run: the allocation is freed at once. One thread at a time.
class StreamScratch {
 public:
  explicit StreamScratch(StreamRef s = StreamRef::host()) : stream_(s) {}
  ~StreamScratch() { drain(); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  StreamRef stream() const noexcept { return stream_; }
  /// Frees `a` once the work enqueued on the stream so far has finished (at once on the host).
  void keep(Allocation a);
  /// Frees what the stream has finished with.
  void collect();
  /// Waits for the stream and frees everything kept.
  void drain() noexcept;
  std::size_t kept() const noexcept { return kept_.size(); }

 private:
  StreamRef stream_;
  std::deque<std::pair<Event, Allocation>> kept_;
};

}  // namespace hzp::schedulers
