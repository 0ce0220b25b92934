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
//  - a receive is posted on the compute stream: NCCL's stream waits for the compute stream so far (the slot it
//    fills may be memory the caching allocator took back from a kernel still queued there) and the compute
//    stream waits for the receive (the next kernels read it), with no wait on the host;
//  - a send waits for the compute stream through an event recorded after the kernels that wrote its buffer, on
//    the link's own send stream; the compute stream never waits for a send.
//
// Why this cannot deadlock, given schedules that run on the host with non-blocking sends (pipeline_stage's CPU
// path) and whose links carry their messages in the same order at both ends (check_boundary_order): take the host
// run's actions in the order they complete and assume every earlier one completed on the device. An action waits
// on the device only for the compute stream before it (earlier actions of its stage) and for its receive. That
// receive's send is posted after the action that produced it (earlier) and behind the link's earlier sends only,
// each of which matches a receive of an earlier action of the receiving stage (same order at both ends): all
// complete. The receive is behind the link's earlier receives (earlier actions) and the compute stream up to its
// own action (earlier actions). So it completes, and so does the action. No send waits on anything but its
// receiver's progress, and nothing on the compute stream waits on a send.
//
// The host: NCCL connects two ranks on their first message, and posting that message can hold the host until the
// peer posts its side. Two neighbours each posting a first send (1F1B again) would then hold each other's hosts
// before either reached its receive. So every link is connected when the links are made, one link at a time in the
// same order on every stage (the earliest link not yet connected always has both of its ends waiting on it), by a
// one-element message; after that, posting never waits for a peer.
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
  /// Posts the receive of `into` from stage `peer`, an activation (`gradient` false) or a gradient. On the device
  /// the compute stream's later work waits for it; the request completes when it has arrived.
  coll::Request receive(TensorView into, int peer, int tag, bool gradient);
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
};

}  // namespace hzp::schedulers
