// The shared-memory transport of one communicator (collectives.transport = auto|shm): for every
// ordered pair of its ranks on one machine a single-producer/single-consumer ring of slots in a POSIX
// shared-memory segment, pumped from the nonblocking progress of the calls (docs/collectives.md
// "Transports"). Messages are matched by (peer, tag) in posting order, as MPI matches them; one that
// arrives before its receive waits in the ring, or is kept aside when it blocks an awaited message.
// Messages of at least collectives.single_copy_bytes go by descriptor: the receiver reads them straight from
// the sender's buffer with process_vm_readv (one copy instead of two) and releases the descriptor's slot when
// done, which is when the send completes. A message whose bytes lie in a SharedBuffer goes by descriptor too
// (collectives.mapped_buffers): the receiver maps the sender's buffer and copies or reduces straight from it.
// A send marked `early` that goes by descriptor ends as soon as the descriptor is out; its sender then asks
// read_by_peer before writing the bytes again (the algorithm keeps them: Poster::send_kept).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "comm_state.hpp"
#include "shared_buffer_registry.hpp"

namespace hzp::coll::detail {

class ShmSegment;  // the mapping (shm_layout.hpp, shm_segment.cpp)
struct SlotHeader;

/// transport = shm, or auto without mpi_native.
bool wants_shm(const MpiCommConfig& config) noexcept;
/// `len` bytes at `address` in process `pid` into `into` (Linux cross-memory attach); an error text, or empty.
std::string read_process_memory(std::int64_t pid, std::uint64_t address, std::byte* into, std::size_t len);
/// Collective over the world's communicator (world constructor): fills ctx.machine_of_world_rank
/// and ctx.job_uid with one nonblocking allgather; nothing when the config resolves to mpi.
void discover_machines(WorldContext& ctx, MPI_Comm comm, const MpiCommConfig& config, std::string_view name);
/// The channel id of a child (split/duplicate) of a communicator with id `parent_id`: `ordinal` counts
/// the parent's split/duplicate calls (collective over it, so the same on every member), and siblings
/// of one split differ by their first member's world rank. Local (no communication).
std::uint64_t child_channel_id(std::uint64_t parent_id, std::uint64_t ordinal, int child_rank0_world_rank) noexcept;

/// A message this rank sends: owned by the operation that posted it, which keeps it alive (and at
/// one address) until it is done or cancelled.
struct ShmSend {
  int peer = -1;
  int tag = 0;
  const std::byte* src = nullptr;
  std::size_t bytes = 0;
  std::byte* copy_to = nullptr;  // send_and_copy: the same bytes also written here
  Header header;
  /// By descriptor, end once the descriptor is out instead of once the receiver has read `src`; the sender
  /// leaves `src` unwritten until read_by_peer(peer, ack_chunk) (a kept send).
  bool early = false;
  // Progress, written by the transport.
  std::size_t put = 0;
  bool started = false;
  bool done = false;
  bool awaiting = false;        // single copy: the descriptor is out, the receiver is reading `src`
  bool unread = false;          // early: done, but the receiver may still be reading `src` (see read_by_peer)
  std::uint64_t ack_chunk = 0;  // the descriptor's chunk number in the ring
};

/// A receive: copy into dst, or (reduce) dst = red.combine(received, b), rounded once when `finish`.
struct ShmRecv {
  int peer = -1;
  int tag = 0;
  std::byte* dst = nullptr;
  std::size_t capacity = 0;  // bytes; a longer message is an error (MPI's truncation)
  bool reduce = false;
  const std::byte* b = nullptr;
  DType a_type = DType::u8, b_type = DType::u8;
  Reducer red;
  bool finish = false;
  // Progress, written by the transport.
  std::size_t msg_bytes = 0;
  std::size_t got = 0;
  Header header;
  bool matched = false;
  bool done = false;
};

class ShmTransport {
 public:
  /// Collective over st.comm, once st's comm, ranks, nodes, config and world are set: maps the
  /// segment of this rank's machine. Returns null (no collective at all) when the config resolves
  /// to mpi, and null when no two ranks of the group share a machine or, under auto, when the
  /// segment could not be set up on some rank (every rank decides alike). Throws IoError for the
  /// latter under transport = shm.
  static std::unique_ptr<ShmTransport> create(const CommState& st);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  /// True when the hop to group rank `peer` goes through this transport (same machine).
  bool reaches(int peer) const noexcept {
    return peer >= 0 && static_cast<std::size_t>(peer) < local_of_.size() && local_of_[peer] >= 0 && peer != rank_;
  }

  void post(ShmSend& s);
  /// Matched against messages already kept aside first (the earliest with its peer and tag).
  void post(ShmRecv& r);
  /// Moves every chunk that can move now, on every channel; true when anything moved. Throws
  /// PreconditionError once the channels were poisoned (see cancel).
  bool pump();
  /// Withdraws a posted message of an operation that is being abandoned. One that has already
  /// moved part of its bytes leaves its ring mid-message: the transport is then poisoned, and every
  /// later pump() throws (the communicator is failed anyway; its peers time out or fail alike).
  void cancel(ShmSend& s) noexcept;
  void cancel(ShmRecv& r) noexcept;
  /// Whether the receiver has read the early send that went out as chunk `chunk` to `peer` (its slot released).
  bool read_by_peer(int peer, std::uint64_t chunk) const;
  /// An early send's operation is abandoned before its receiver read it: the caller may write the bytes while the
  /// peer reads them, so the transport is poisoned, as for a message abandoned mid-way (cancel).
  void abandon_unread(int peer, std::uint64_t chunk) noexcept;

  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  int slots() const noexcept { return slots_; }
  /// The smallest message sent by descriptor (single copy), or 0 when every message goes through the slots.
  std::size_t single_copy_bytes() const noexcept { return single_copy_bytes_; }
  /// Whether a message from a SharedBuffer is read by the receiver from the sender's pages (mapped).
  bool mapped_buffers() const noexcept { return mapped_; }

 private:
  struct Unexpected {
    int tag = 0;
    std::size_t msg_bytes = 0;
    std::size_t got = 0;
    Header header;
    std::unique_ptr<std::byte[]> data;  // not zeroed: every byte is written before it is read
  };
  struct Channel {
    int peer = -1;
    SlotHeader* out = nullptr;  // ring this rank fills, peer drains
    SlotHeader* in = nullptr;   // ring the peer fills, this rank drains
    std::uint64_t tx = 0;       // chunks written to `out` so far
    std::uint64_t rx = 0;       // chunks read from `in` so far
    std::deque<ShmSend*> sends;  // in posting order; the head is being written
    std::deque<ShmRecv*> posted;  // unmatched receives, in posting order
    std::list<Unexpected> unexpected;  // arrived before their receive, in arrival order
    ShmRecv* cur_recv = nullptr;       // the message being read from `in`: a receive...
    Unexpected* cur_unexpected = nullptr;  // ...or one kept aside
    bool cur_direct = false;               // ...by descriptor, from here:
    std::int64_t cur_pid = 0;
    std::uint64_t cur_address = 0;
    bool cur_mapped = false;  // ...from the sender's shared buffer, mapped here:
    SharedRange cur_range;
  };

  /// machine_index: group rank -> index among the group's ranks on this machine, or -1.
  ShmTransport(std::unique_ptr<ShmSegment> segment, const CommState& st, const std::vector<int>& machine_index,
               std::size_t single_copy_bytes, bool mapped);
  Channel& channel(int peer) { return channels_[static_cast<std::size_t>(local_of_[peer])]; }
  bool send_one(Channel& c);
  /// `shared`: the SharedBuffer range holding the message (a mapped message), or null (process_vm_readv).
  bool send_descriptor(Channel& c, ShmSend& s, SlotHeader* h, const SharedRange* shared);
  bool recv_one(Channel& c);
  /// The next piece of the single-copy message in `h` into the current receive (or kept-aside message); true
  /// once the whole message is in.
  bool read_direct(Channel& c, const SlotHeader& h);
  void deliver(ShmRecv& r, const std::byte* src, std::size_t offset, std::size_t len);
  void take_unexpected(Channel& c, ShmRecv& r, std::list<Unexpected>::iterator it);
  SlotHeader* slot(SlotHeader* ring, std::uint64_t chunk) const noexcept;
  const Channel& channel(int peer) const { return channels_[static_cast<std::size_t>(local_of_[peer])]; }
  [[noreturn]] void fail(const std::string& why);
  void check_usable() const;

  std::unique_ptr<ShmSegment> segment_;
  std::string comm_name_;
  int rank_ = 0;
  std::vector<int> local_of_;     // group rank -> index into channels_, or -1 (other machine / self)
  std::deque<Channel> channels_;  // one per peer on this machine (a deque: Channel is not copyable)
  std::size_t slot_bytes_ = 0;
  std::size_t slot_stride_ = 0;
  int slots_ = 0;
  std::size_t single_copy_bytes_ = 0;
  bool mapped_ = false;
  PeerMappings peer_maps_;  // the peers' shared buffers, mapped here as their messages arrive
  std::vector<std::byte> staging_;  // single-copy reductions: a piece read before it is combined
  // By contract one thread uses a communicator at a time; the lock makes a slip (two threads
  // polling two requests of one communicator) safe rather than corrupting, at ~20 ns per pump.
  mutable std::mutex mu_;
  std::string poisoned_;
};

}  // namespace hzp::coll::detail
