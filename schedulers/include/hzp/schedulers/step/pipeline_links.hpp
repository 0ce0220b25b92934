// The point-to-point links of one pipeline stage: where its boundary sends and receives are posted. On the host,
// the pipeline group itself, messages matched by tag (the MPI backend). On a CUDA stream (NCCL: no tags, matching
// by order, and a posted ncclSend that has no receive yet blocks its stream), every directed link has its own
// communicator and every outgoing link its own stream, so that no message can wait behind another:
//
//  - links: "activations into stage t" and "gradients into stage t", for each t; 2·pp duplicates of the pipeline
//    group, made once, in the same order on every stage. On such a communicator stage t only receives (from
//    t − 1, resp. t + 1) and the one sender only sends: a communicator's stream never holds a send and a receive
//    of this stage, so the send-forward / receive-backward pairs of 1F1B's steady state (each neighbour posting a
//    send before the matching receive) are on different streams and cannot block each other;
//  - a receive is posted an action ahead of the action that reads it (receive_posts, boundary_order.hpp), on its
//    link's receive stream (activations in, gradients in): that stream first waits for the compute stream so far
//    (the slot it fills may be memory the caching allocator took back from a kernel still queued there), then the
//    receive runs while the compute stream runs the action in between; an event recorded after it is what the
//    compute stream waits for, right before the reading action (arrive()), with no wait on the host. The slot
//    belongs to the reading action's context from the post on (input_slot(), output_grad_slot_keeping_output()),
//    so the allocator cannot hand it to anyone else meanwhile;
//  - a send waits for the compute stream through an event recorded after the kernels that wrote its buffer, on
//    the link's own send stream; the compute stream never waits for a send.
//
// Why this cannot deadlock, given schedules that run on the host with non-blocking sends (pipeline_stage's CPU
// path) and whose links carry their messages in the same order at both ends (check_boundary_order): take the host
// run's actions in the order they complete and assume every earlier one completed on the device. An action waits
// on the device only for the compute stream before it (earlier actions of its stage) and for its receive. That
// receive's send is posted after the action that produced it (earlier) and behind the link's earlier sends only,
// each of which matches a receive of an earlier action of the receiving stage (same order at both ends): all
// complete. The receive is behind the link's earlier receives (earlier actions: posted in their readers' order) and
// the compute stream up to the action before its reader at most (earlier actions). So it completes, and so does
// the action. No send waits on anything but its
// receiver's progress, and nothing on the compute stream waits on a send.
//
// The host: NCCL connects two ranks on their first message, and posting that message can hold the host until the
// peer posts its side. Two neighbours each posting a first send (1F1B again) would then hold each other's hosts
// before either reached its receive. So every link is connected when the links are made, one link at a time in the
// same order on every stage (the earliest link not yet connected always has both of its ends waiting on it), by a
// one-element message; after that, posting never waits for a peer.
//
// NCCL kernels on one GPU (NCCL's user guide, "Using multiple NCCL communicators concurrently", and its thread-safety
// page, read 2026-11-28): an NCCL operation runs as a kernel that waits on the device for its peers, and CUDA does
// not promise that two kernels of different streams run at the same time; so NCCL promises nothing when operations
// of different communicators are in flight together, unless every rank issues them in one consistent order (then
// even run one after another each finds its peer running) or they are issued inside one ncclGroupStart/End (one
// launch). The argument above assumes the opposite: 1F1B's steady state has stage s issue send(activation to s+1)
// then receive(gradient from s+1), and stage s+1 send(gradient to s) then receive(activation from s); run one
// kernel at a time in that order, each send waits for a receive queued behind the other stage's send: a deadlock
// that only NCCL kernels sharing the device avoids (they do in practice: a point-to-point kernel takes few SMs, and
// the compute kernels beside it leave room, but that is the device's choice, not a promise). What NCCL does promise
// would need each such pair issued as one group across the two link communicators (Megatron's
// send-forward-receive-backward is one batch for this reason), so that both ends launch one kernel that moves both
// messages. That is not built: the Communicator interface groups calls on one communicator only
// (start_p2p_batch), and a group across communicators needs the NCCL backend's per-call events recorded after
// ncclGroupEnd instead of after each call. It also costs the early receive its overlap: a group waits for all of
// its streams, so a receive grouped with the send of the action before its reader would start after that action,
// not beside it. Until it is built, a first multi-GPU run that hangs with every stage inside an NCCL kernel
// (all ranks' Request::wait at their deadline, compute idle) points here; NCCL_MAX_CTAS or fewer channels make the
// kernels smaller and less likely to be kept apart.
#pragma once

#include <memory>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::schedulers {

class PipelineLinks {
 public:
  /// This stage's links over `pp` for work on `compute`. On a device stream: collective over `pp` (every stage
  /// makes its duplicates and connects them in the same order, with one element from `alloc` as the message; the
  /// pipeline group's counters record those 2·pp connecting messages). `pp` must outlive the links.
  PipelineLinks(coll::Communicator& pp, StreamRef compute, CachingAllocator& alloc);
  ~PipelineLinks();
  PipelineLinks(const PipelineLinks&) = delete;
  PipelineLinks& operator=(const PipelineLinks&) = delete;

  /// True when the stage runs on a device stream (the links described above), false on the host (tags).
  bool on_device() const noexcept { return compute_.device().is_cuda(); }
  /// A posted receive: its request, and on a device the pooled event recorded after it on its receive stream.
  struct Posted {
    coll::Request request;
    Event* arrived = nullptr;
  };
  /// Posts the receive of `into` from stage `peer`, an activation (`gradient` false) or a gradient. On the host the
  /// request completes when it has arrived (the compute stream is the host). On a device it runs on the link's
  /// receive stream after the compute stream's work so far, and the compute stream does not wait for it until
  /// arrive(); `into` must stay allocated until then.
  Posted receive(TensorView into, int peer, int tag, bool gradient);
  /// On a device: the compute stream's later work waits for the receive (timed as a wait at use when the calling
  /// thread's stall clock observes the compute stream), and its event goes back to the pool. No-op on the host.
  void arrive(Posted& r);
  /// Posts the send of `buf` (written by the compute stream's work so far) to stage `peer`. The buffer must stay
  /// allocated until the request completes.
  coll::Request send(ConstTensorView buf, int peer, int tag, bool gradient);

 private:
  coll::Communicator& pp_;
  StreamRef compute_;
  // On a device: [gradient][receiving stage], and the two send streams (activations out, gradients out) with the
  // event that orders each after the compute stream.
  std::vector<std::unique_ptr<coll::Communicator>> into_[2];
  std::vector<Stream> out_;
  Event produced_;
  // On a device: the two receive streams (activations in, gradients in), the event that orders a receive after the
  // compute stream, and the events recorded after receives, made as needed and reused (at most the receives posted
  // and not yet arrived: two per link with posts an action ahead).
  std::vector<Stream> in_;
  Event posted_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<Event*> free_events_;
};

}  // namespace hzp::schedulers
