// Internal state of an MpiCommunicator and the pieces its requests are built from: the persistent
// scratch pool, the timing header that travels with every message, the Operation interface (our
// algorithms over point-to-point on MPI or the shared-memory transport, or an MPICH native
// collective), and the request that waits on an operation under the wait policy, deadline and model.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "hzp/collectives/mpi_communicator.hpp"

namespace hzp::coll::detail {

class ShmTransport;

/// Travels with every message (a 16-byte companion message on a sibling tag): the latest join
/// time and the latest link-ready time the sender has heard of, itself included. Max-propagated
/// along the algorithm's rounds, so when a ring, doubling or dissemination pattern completes,
/// every rank knows the group's last join (docs/collectives.md "Join time").
struct Header {
  double join = 0;
  double ready = 0;
  void merge(const Header& h) noexcept {
    if (h.join > join) join = h.join;
    if (h.ready > ready) ready = h.ready;
  }
};

/// Persistent scratch buffers of one communicator, reused across calls: a call leases one and
/// returns it on completion; several can be leased at once (overlapping nonblocking calls). A
/// buffer only grows, so the steady state allocates nothing.
class ScratchPool {
 public:
  class Lease {
   public:
    Lease() = default;
    Lease(ScratchPool* pool, std::unique_ptr<std::vector<std::byte>> buf) : pool_(pool), buf_(std::move(buf)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    std::byte* data() const noexcept { return buf_ ? buf_->data() : nullptr; }

   private:
    ScratchPool* pool_ = nullptr;
    std::unique_ptr<std::vector<std::byte>> buf_;
  };

  Lease acquire(std::size_t bytes);
  /// Bytes held by the pool's buffers (tests check reuse with it).
  std::size_t capacity_bytes() const;

 private:
  void give_back(std::unique_ptr<std::vector<std::byte>> buf);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> free_;
  std::size_t total_ = 0;
};

/// Shared by every communicator derived from one world.
struct WorldContext {
  std::vector<int> node_of_world_rank;
  std::shared_ptr<LinkEmulator> links;  // null when links.emulate is off
  // Shared-memory transport (shm_segment.cpp); empty / 0 when the config resolves to mpi.
  std::vector<std::uint64_t> machine_of_world_rank;  // equal keys = one machine (physical, not virtual)
  std::uint64_t job_uid = 0;                         // chosen by world rank 0: names this world's segments
};

struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::string name;
  MpiCommConfig config;
  std::shared_ptr<const WorldContext> world;
  std::vector<int> world_ranks;  // group rank -> world rank
  std::vector<int> nodes;        // group rank -> node
  std::shared_ptr<CommCounters> counters;
  int group_id = -1;
  // Collectives are numbered apart from point-to-point: every rank counts the same collectives,
  // so the number names the same call everywhere (and picks its tags); p2p is local.
  std::uint64_t coll_seq = 0;
  std::uint64_t p2p_seq = 0;
  ScratchPool scratch;
  std::atomic<bool> failed{false};
  mutable std::mutex fail_mu;
  std::string fail_reason;
  // Shared-memory channels: this communicator's own namespace (id), the number of children it has
  // made (names theirs), and the transport itself (null: every hop goes through MPI).
  std::uint64_t channel_id = 0;
  std::uint64_t children = 0;
  std::unique_ptr<ShmTransport> shm;
  // A phantom world's communicator (docs/phantom.md): no MPI_Comm, no peers; calls run phantom operations.
  bool phantom = false;

  CommState() = default;
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;
  ~CommState();

  LinkLevel level_to(int peer) const noexcept {
    return nodes[static_cast<std::size_t>(peer)] == nodes[static_cast<std::size_t>(rank)] ? LinkLevel::intra
                                                                                           : LinkLevel::inter;
  }
  /// Throws PreconditionError naming the earlier failure when a deadline fired on this communicator.
  void check_usable(CollOp op) const;
  void mark_failed(const std::string& reason);
};

/// Fills the members' part of a new communicator's state: name, config, world, the members' world ranks and their
/// nodes, counters (interned as group `name`). Shared by the world, split/duplicate children and phantom worlds.
void set_members(CommState& st, std::shared_ptr<const WorldContext> world, const MpiCommConfig& config,
                 std::vector<int> world_ranks, std::string name, std::shared_ptr<CommCounters> counters);

/// Tags: user point-to-point uses 2*tag (data) and 2*tag+1 (header), tag <= kMaxUserTag; each
/// collective uses a pair above that, chosen by its sequence number, so overlapping nonblocking
/// collectives of one communicator never match each other's messages.
struct TagPair {
  int data;
  int header;
};
TagPair collective_tags(std::uint64_t seq) noexcept;
TagPair p2p_tags(int user_tag) noexcept;

/// An in-flight transfer.
class Operation {
 public:
  virtual ~Operation() = default;
  /// Makes progress without blocking; true once the transfer (and its local work) is complete.
  virtual bool progress() = 0;
  /// Whether the last progress() moved data without completing: a waiter then polls again at once
  /// instead of giving its core away (the shared-memory transport moves data only while polled).
  virtual bool moved() const noexcept { return false; }
  /// Latest join/ready heard so far (own included).
  virtual Header known() const noexcept = 0;
  /// Bytes this rank sent per LinkLevel (observed, or modelled when bytes_modelled()).
  virtual std::array<std::uint64_t, kNumLinkLevels> bytes() const noexcept = 0;
  virtual bool bytes_modelled() const noexcept = 0;
  virtual std::string_view algorithm() const noexcept = 0;
  /// "round 2 of 3, waiting for ranks {1, 3}": for timeout messages.
  virtual std::string pending() const = 0;
  /// After a failure: cancels receives still posted (so a late message cannot land in a buffer
  /// the caller is about to free) and releases sends.
  virtual void abandon() noexcept = 0;
  /// True when the call's emulated link time was spent holding a device stream (a phantom call on device buffers,
  /// GpuLinkHold) rather than by its waiter: the request then sleeps nothing and records held_s() as emulated.
  virtual bool held_on_stream() const noexcept { return false; }
  /// Seconds the stream hold slept (valid once progress() returned true).
  virtual double held_s() const noexcept { return 0; }
};

/// Books an emulated call's links at the group's last join (what the join round told) and returns this rank's
/// ready time (join_round.hpp).
using JoinBooking = std::function<double(double last_join)>;

/// Our algorithm over MPI_Isend/Irecv, and the shared-memory transport for the hops it reaches
/// (p2p_operation.cpp). Posts round 0 before returning. With `book`, round 0 is the join round: once it is done the
/// operation books at the latest join it has heard and sends the ready time it gets from then on.
std::unique_ptr<Operation> make_p2p_operation(CommState& st, std::unique_ptr<Algorithm> alg, TagPair tags,
                                              Header own, ScratchPool::Lease scratch, JoinBooking book = {});

/// Builds the dry replica of the call's algorithm for group rank q (null buffers).
using DryFactory = std::function<std::unique_ptr<Algorithm>(int q)>;

/// Replays the algorithm of every rank (all_ranks) or of this rank only (its receives then stand
/// for the peers' sends: all_to_allv, where peers' counts are unknown here) and applies the link
/// model (link_model.cpp).
CollectiveModel model_call(const CommState& st, const DryFactory& dry, bool all_ranks);
/// Bytes this rank's algorithm would send per level (native collectives' modelled bytes).
std::array<std::uint64_t, kNumLinkLevels> replay_bytes(const CommState& st, Algorithm& dry_self);

/// What start_X records about the call.
struct CallInfo {
  CollOp op = CollOp::barrier;
  DType dtype = DType::u8;
  std::int64_t count = 0;
  int peer = -1;
  int tag = 0;  // send/recv
  std::uint64_t seq = 0;
  double join = 0;
};

/// The Request::Impl of every MPI call: waits on `op` under the wait policy and the deadline,
/// sleeps the remainder of the link model (when `model` is given; `booked` is where the links were reserved
/// for it, at launch or, by `op`, after its join round), records counters once.
Request make_request(std::shared_ptr<CommState> st, const CallInfo& info, std::unique_ptr<Operation> op,
                     const CollectiveModel* model, std::shared_ptr<const LinkReservation> booked);

}  // namespace hzp::coll::detail
