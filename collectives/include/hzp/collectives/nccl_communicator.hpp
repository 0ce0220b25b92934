// NcclCommunicator: the Communicator over NCCL for device buffers (docs/cuda.md). The unique id travels
// through an injected Bootstrap (MpiBootstrap in practice), so this backend does not use MPI itself.
//
// Stream semantics: each communicator owns a communication stream. start_X(..., s) makes that stream wait
// for the work enqueued on `s` so far (an event, never a device-wide sync), enqueues the NCCL call on it,
// and makes `s` wait for the call's end: work enqueued on `s` afterwards sees the result, and the
// compute stream never blocks the host. The Request completes (test/wait) when the call has finished on
// the device; wait() polls the completion event and ncclCommGetAsyncError under collectives.timeout_s,
// and on a deadline aborts the communicator (ncclCommAbort) and throws TimeoutError.
//
// Link emulation on the GPU (links.emulate): the communication stream is held, without occupying any
// SM, for whatever the modelled duration leaves after the real transfer: a host function enqueued
// before the NCCL call stamps the wall time at which the stream reaches it; one enqueued after it sleeps
// until stamp + modelled duration (GpuLinkHold, gpu_link_hold.hpp). docs/cuda.md gives the cost.
//
// send/recv: NCCL has no tags; a pair matches by order between the two ranks (the tag is recorded but
// not used for matching). start_p2p_batch issues its messages inside one ncclGroupStart/ncclGroupEnd on the
// communication stream (one enqueue, one completion event, one link hold for the batch's sends in turn) and
// still counts one record per message, numbered receives first as the default implementation numbers them. Thread safety as for every Communicator: one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hzp/collectives/bootstrap.hpp"
#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/gpu_link_hold.hpp"
#include "hzp/collectives/link_emulator.hpp"

namespace hzp::coll {

struct NcclCommConfig {
  std::string name = "world";
  int device = 0;            // CUDA device of this rank
  double timeout_s = 300;    // deadline of every wait (collectives.timeout_s)
  LinkEmulationConfig links; // enabled = false: no emulation
  /// Node of every rank of the group (empty: all on one node). A group spanning nodes is modelled on
  /// the inter-node link, else on the intra-node one.
  std::vector<int> node_of_rank;
  /// Test and benchmark hook, not an option: every call holds the communication stream at least this long
  /// (GpuLinkHold, as link emulation does), with or without `links`. A one-rank group has no rounds, so the link
  /// model gives it nothing to hold; this gives one GPU a collective of known duration. 0: off. Inherited by
  /// split() and duplicate().
  double min_hold_s = 0;
};

/// True when this build has the NCCL backend (HZP_HAVE_NCCL).
bool nccl_available() noexcept;
/// NCCL's version as "major.minor.patch", or "none".
std::string nccl_version();

class NcclCommunicator final : public Communicator {
 public:
  /// Collective over the bootstrap's processes: rank 0 makes the unique id, the bootstrap broadcasts
  /// it, every rank initialises its NCCL communicator on config.device (with the deadline). Throws
  /// UnsupportedError in a build without NCCL.
  NcclCommunicator(Bootstrap& bootstrap, NcclCommConfig config);
  ~NcclCommunicator() override;

  int rank() const noexcept override;
  int size() const noexcept override;
  const std::string& name() const noexcept override;
  Device device() const noexcept override;
  CommCounters& counters() noexcept override;
  /// The communication stream this communicator enqueues on.
  StreamRef comm_stream() const noexcept;

  Request start_all_gather(ConstTensorView in, TensorView out, StreamRef s) override;
  Request start_reduce_scatter(ConstTensorView in, TensorView out, ReduceOp op, StreamRef s) override;
  Request start_all_reduce(TensorView buf, ReduceOp op, StreamRef s) override;
  Request start_all_to_all(ConstTensorView in, TensorView out, StreamRef s) override;
  Request start_all_to_allv(ConstTensorView in, std::span<const std::int64_t> send_counts, TensorView out,
                            std::span<const std::int64_t> recv_counts, StreamRef s) override;
  Request start_broadcast(TensorView buf, int root, StreamRef s) override;
  Request start_send(ConstTensorView buf, int peer, int tag, StreamRef s) override;
  Request start_recv(TensorView buf, int peer, int tag, StreamRef s) override;
  Request start_p2p_batch(std::span<const SendOp> sends, std::span<const RecvOp> recvs, StreamRef s) override;
  Request start_barrier() override;
  /// ncclCommSplit; nullptr for color < 0.
  std::unique_ptr<Communicator> split(int color, int key, std::string name, bool share_counters = true) override;
  std::unique_ptr<Communicator> duplicate(std::string name, bool share_counters = true) override;

  struct State;

 private:
  explicit NcclCommunicator(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace hzp::coll
