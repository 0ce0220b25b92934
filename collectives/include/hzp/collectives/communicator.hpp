// The Communicator interface every scheduler's communication goes through (docs/architecture.md,
// Contracts; the MPI backend in docs/collectives.md).
//
// Typed: buffers are tensor views, so counts are elements and the dtype travels with them; the
// bytes-vs-elements mistake cannot be written. Every collective exists blocking and non-blocking:
// start_X returns a Request whose wait()/test() completes it. Blocking X = start_X(...).wait().
//
// Stream semantics: the MPI backend works on host buffers; it synchronises the given stream before
// touching buffers and its requests complete on the host. The NCCL backend (docs/cuda.md) enqueues on
// the stream; its requests complete when the stream work has finished.
//
// Thread safety: a communicator is used by one thread at a time, and its requests are completed by
// the thread that started them. A background thread gets its own duplicate(). Every rank of a group
// must start the group's collectives in the same order.
//
// Deadlines: every wait on communication has a deadline (collectives.timeout_s). A deadline that fires
// throws hzp::TimeoutError naming the op, the group, the sequence number and the rank, and leaves the
// communicator unusable (any later call throws): peers may be mid-protocol, so nothing after it can be
// trusted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "hzp/collectives/types.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::coll {

class CommCounters;

/// A rank's place in a split: ranks with equal `color` form a group, ordered by `key`; color < 0 = no group.
struct GroupSlot {
  int color = 0;
  int key = 0;
};

/// The slot of every rank of a parent communicator, as a function of the parent rank (the world rank when the
/// parent is the world). Pure: it may be evaluated for any rank, in any order (docs/phantom.md).
using SlotOf = std::function<GroupSlot(int parent_rank)>;

/// An in-flight operation. Move-only; destroying an unfinished request waits for it (a destructor
/// cannot throw, so errors there are logged), because the buffers it names must outlive the transfer.
class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    /// Makes progress without blocking; true once complete (then buffers may be reused).
    virtual bool test() = 0;
    /// Blocks (under the communicator's wait policy and deadline) until complete.
    virtual void wait() = 0;
    /// test() without counting its own time as this request's wait: a caller that waits on several requests
    /// times the wait itself (wait_all) and hands it over with add_wait.
    virtual bool test_untimed() { return test(); }
    /// `seconds` the caller spent waiting for this request (wait_all's rounds), counted as this request's wait.
    virtual void add_wait(double seconds) { (void)seconds; }
    /// Gives the core away once between unsuccessful polls (wait_all's rounds), as wait() does under the
    /// communicator's wait policy: a yield, or the next sleep of a back-off that starts afresh when data moved.
    virtual void pause();
  };

  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  bool test();
  void wait();
  /// See Impl::test_untimed, Impl::add_wait and Impl::pause (nothing once complete).
  bool test_untimed();
  void add_wait(double seconds);
  void pause();
  /// True when the request was never started or has completed.
  bool done() const noexcept { return impl_ == nullptr; }

 private:
  // test() or test_untimed() through the impl, which is released once complete or failed.
  bool poll(bool (Impl::*test)());
  std::unique_ptr<Impl> impl_;
};

/// Completes every request of `requests`, polling all of them in turn (a shared-memory transfer moves only while
/// its request is polled, so waiting on one alone could stall a peer waiting for another) and giving the core away
/// between rounds under the first pending request's wait policy (Impl::pause). Each round (its polls and its pause)
/// is counted whole as the wait of the first request still pending, so the waits the requests record add up to the
/// wall time of the whole wait, as one wait() would record it (timing every poll separately instead loses the clock
/// reads' own time, a large share when rounds take under a microsecond). Deadlines: each request's own, enforced by
/// its polls. Marks the thread as waiting on communication for the harness.
void wait_all(std::span<Request> requests);

/// One message of a point-to-point batch (Communicator::start_p2p_batch): `buf` to or from rank `peer` of the
/// group under `tag`, as start_send / start_recv take them.
struct SendOp {
  ConstTensorView buf;
  int peer = 0;
  int tag = 0;
};
struct RecvOp {
  TensorView buf;
  int peer = 0;
  int tag = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Group name used by counters and errors ("world", "z3", "replica", "harness", ...).
  virtual const std::string& name() const noexcept = 0;
  /// Where buffers passed to this communicator must live.
  virtual Device device() const noexcept = 0;
  /// Per-call and per-level byte counters of this communicator (shared by communicators created
  /// with share_counters = true from it).
  virtual CommCounters& counters() noexcept = 0;

  // --- non-blocking forms --------------------------------------------------------------------------
  /// out[r*n : (r+1)*n] = in of rank r, n = in.numel(); out.numel() must be size()*n.
  virtual Request start_all_gather(ConstTensorView in, TensorView out, StreamRef s) = 0;
  /// out = op over ranks of in[rank*n : (rank+1)*n], n = out.numel(); in.numel() must be size()*n.
  /// bf16 sums are computed in fp32 and rounded once.
  virtual Request start_reduce_scatter(ConstTensorView in, TensorView out, ReduceOp op, StreamRef s) = 0;
  /// In place: buf = op over ranks of buf.
  virtual Request start_all_reduce(TensorView buf, ReduceOp op, StreamRef s) = 0;
  /// Block r of `in` (in.numel()/size() elements) goes to rank r; block r of `out` comes from rank r.
  virtual Request start_all_to_all(ConstTensorView in, TensorView out, StreamRef s) = 0;
  /// Variable-size all-to-all: send_counts[r] elements to rank r, recv_counts[r] from rank r,
  /// packed in rank order in `in` and `out`.
  virtual Request start_all_to_allv(ConstTensorView in, std::span<const std::int64_t> send_counts,
                                    TensorView out, std::span<const std::int64_t> recv_counts,
                                    StreamRef s) = 0;
  /// buf of rank `root` is copied into buf of every rank.
  virtual Request start_broadcast(TensorView buf, int root, StreamRef s) = 0;
  virtual Request start_send(ConstTensorView buf, int peer, int tag, StreamRef s) = 0;
  virtual Request start_recv(TensorView buf, int peer, int tag, StreamRef s) = 0;
  virtual Request start_barrier() = 0;
  /// Point-to-point messages started together and completed by one Request (empty lists: a done Request).
  /// Each message matches, is counted and is numbered exactly as its own start_send / start_recv would be.
  /// Default (the MPI and phantom backends): start_recv for each of `recvs` in order, then start_send for each
  /// of `sends`; the Request completes when all of them have, polling every one as wait_all does (so a transfer
  /// that moves only while polled keeps moving). The NCCL backend issues the whole batch inside one
  /// ncclGroupStart/ncclGroupEnd: NCCL runs a communicator's calls in order on one stream and an unmatched
  /// ncclRecv or ncclSend blocks it, so a ring exchange where every rank receives before it sends deadlocks as
  /// separate calls and completes as one batch. Every rank of an exchange must post its batches in the same order.
  virtual Request start_p2p_batch(std::span<const SendOp> sends, std::span<const RecvOp> recvs, StreamRef s);

  // --- blocking forms ------------------------------------------------------------------------------
  void all_gather(ConstTensorView in, TensorView out, StreamRef s) { start_all_gather(in, out, s).wait(); }
  void reduce_scatter(ConstTensorView in, TensorView out, ReduceOp op, StreamRef s) {
    start_reduce_scatter(in, out, op, s).wait();
  }
  void all_reduce(TensorView buf, ReduceOp op, StreamRef s) { start_all_reduce(buf, op, s).wait(); }
  void all_to_all(ConstTensorView in, TensorView out, StreamRef s) { start_all_to_all(in, out, s).wait(); }
  void broadcast(TensorView buf, int root, StreamRef s) { start_broadcast(buf, root, s).wait(); }
  void send(ConstTensorView buf, int peer, int tag, StreamRef s) { start_send(buf, peer, tag, s).wait(); }
  void recv(TensorView buf, int peer, int tag, StreamRef s) { start_recv(buf, peer, tag, s).wait(); }
  void barrier() { start_barrier().wait(); }

  // --- groups --------------------------------------------------------------------------------------
  /// Collective over this communicator: ranks with the same color form a new communicator, ordered
  /// by key. Returns nullptr for color < 0.
  virtual std::unique_ptr<Communicator> split(int color, int key, std::string name,
                                              bool share_counters = true) = 0;
  /// Collective: same group, independent message space (for a background thread).
  virtual std::unique_ptr<Communicator> duplicate(std::string name, bool share_counters = true) = 0;
  /// split() given every rank's slot, not only this one's: a real communicator evaluates slot_of(rank()) and
  /// splits (the same collective, the same result); a phantom one (docs/phantom.md), which has no peers to ask,
  /// evaluates it for every parent rank to learn its new group's members. Collective like split().
  virtual std::unique_ptr<Communicator> split_by(const SlotOf& slot_of, std::string name, bool share_counters = true) {
    const GroupSlot s = slot_of(rank());
    return split(s.color, s.key, std::move(name), share_counters);
  }
};

}  // namespace hzp::coll
