// MpiCommunicator: the Communicator on host buffers over MPI (docs/collectives.md).
// Ring and latency-optimal algorithms over nonblocking point-to-point on a duplicated MPI_Comm (bytes
// per link level known by construction), or MPICH's native collectives (bytes modelled). Hops inside a
// machine go through shared-memory rings when collectives.transport allows. Waits poll under a wait
// policy and a deadline; counters and link emulation apply to every call, whatever the transport.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/link_emulator.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/core/enum_names.hpp"

namespace hzp::coll {

/// How a thread waits on nonblocking MPI (docs/environment.md "MPI on oversubscribed cores": MPICH
/// busy-polls when oversubscribed, so we poll MPI_Test ourselves and give the core away between polls).
enum class WaitPolicy : std::uint8_t {
  yield,    // MPI_Test + sched_yield: lowest latency when ranks <= cores
  backoff,  // MPI_Test + nanosleep, 1 us doubling up to backoff_max_us: best oversubscribed
  mixed,    // yield for the first ~100 us of a wait, then back off
};
/// The collectives.wait_policy names.
inline constexpr EnumName<WaitPolicy> kWaitPolicyNames[] = {
    {"yield", WaitPolicy::yield}, {"backoff", WaitPolicy::backoff}, {"mixed", WaitPolicy::mixed}};
std::string_view wait_policy_name(WaitPolicy p) noexcept;
std::optional<WaitPolicy> parse_wait_policy(std::string_view name) noexcept;

/// What carries the data of a hop between two ranks on the same machine (hops between machines
/// always use MPI point-to-point). Counters and link emulation do not depend on it.
enum class Transport : std::uint8_t {
  automatic,  // "auto": shm when the machine allows it and mpi_native is off, else mpi
  mpi,        // MPI_Isend/MPI_Irecv (MPICH's shared-memory path: two copies, 2-4 GB/s here)
  shm,        // our shared-memory rings; an error when they cannot be set up
};
/// The collectives.transport names.
inline constexpr EnumName<Transport> kTransportNames[] = {
    {"auto", Transport::automatic}, {"mpi", Transport::mpi}, {"shm", Transport::shm}};
std::string_view transport_name(Transport t) noexcept;
std::optional<Transport> parse_transport(std::string_view name) noexcept;

/// Settings of the MPI backend; the harness fills it from the option table (collectives.*,
/// links.*). Validated by the communicator's constructor (validate() throws ConfigError naming
/// the option key and value).
struct MpiCommConfig {
  /// Default chosen from measurements on this machine class (docs/collectives.md "Wait policy").
  WaitPolicy wait_policy = WaitPolicy::mixed;
  double backoff_max_us = 50;         // collectives.backoff_max_us, > 0
  double timeout_s = 300;             // collectives.timeout_s, > 0
  std::size_t small_message_bytes = 65536;  // collectives.small_message_bytes; 0 = always ring
  bool mpi_native = false;            // collectives.mpi_native
  Transport transport = Transport::automatic;  // collectives.transport
  /// Shared-memory rings: slots per direction of each pair of ranks, and bytes per slot (a message
  /// streams through them in slot-sized chunks). Defaults measured in docs/collectives-benchmark.md.
  std::size_t shm_slot_bytes = 256 * 1024;  // collectives.shm_slot_bytes, multiple of 4096
  int shm_slots = 4;                        // collectives.shm_slots, 2..64
  /// Messages of at least this many bytes between ranks of one machine are read by the receiver straight from
  /// the sender's buffer (Linux cross-memory attach, process_vm_readv) instead of through the slots: one copy
  /// instead of two. 0 = never (the default: measured, it wins only in a middle range of sizes and ops;
  /// docs/collectives.md "Single copy"). Where the kernel refuses it, the slots are kept (and the run says so).
  std::size_t single_copy_bytes = 0;  // collectives.single_copy_bytes
  /// Messages between ranks of one machine whose bytes lie in a SharedBuffer (shared_buffer.hpp) are read by the
  /// receiver from its mapping of the sender's buffer: one copy, no cross-process syscall (docs/collectives.md
  /// "Mapped buffers"). Off by default: measured on a loaded machine it wins all_gather and reduce_scatter and
  /// loses all_reduce. Where peers cannot map each other's buffers, the slots are kept (and the run says so).
  bool mapped_buffers = false;  // collectives.mapped_buffers
  LinkEmulationConfig links;          // links.*

  void validate() const;
};

namespace detail {
struct CommState;
}

class MpiCommunicator final : public Communicator {
 public:
  /// Collective over `world` (every rank of it calls this): the communicator works on a duplicate
  /// of `world`; `topology` gives the node of every rank of `world` (topology.world_size() must
  /// equal its size, topology.rank() its rank), which decides whether each hop is intra- or
  /// inter-node. Sub-communicators made by split()/duplicate() keep the world ranks of their
  /// members, so they know the node of every peer too. Throws ConfigError on an invalid config,
  /// PreconditionError when the topology does not describe `world`.
  MpiCommunicator(MPI_Comm world, const Topology& topology, MpiCommConfig config,
                  std::string name = "world");
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const noexcept override;
  int size() const noexcept override;
  const std::string& name() const noexcept override;
  Device device() const noexcept override { return Device::cpu(); }
  CommCounters& counters() noexcept override;

  // Stream semantics: each start_X synchronises `s` before touching buffers (a no-op for the host
  // stream); the request completes on the host. Buffers must stay valid until it completes.
  Request start_all_gather(ConstTensorView in, TensorView out, StreamRef s) override;
  Request start_reduce_scatter(ConstTensorView in, TensorView out, ReduceOp op, StreamRef s) override;
  Request start_all_reduce(TensorView buf, ReduceOp op, StreamRef s) override;
  Request start_all_to_all(ConstTensorView in, TensorView out, StreamRef s) override;
  Request start_all_to_allv(ConstTensorView in, std::span<const std::int64_t> send_counts, TensorView out,
                            std::span<const std::int64_t> recv_counts, StreamRef s) override;
  Request start_broadcast(TensorView buf, int root, StreamRef s) override;
  /// User tags are 0..kMaxUserTag (collectives use the tags above).
  Request start_send(ConstTensorView buf, int peer, int tag, StreamRef s) override;
  Request start_recv(TensorView buf, int peer, int tag, StreamRef s) override;
  Request start_barrier() override;

  /// Collective (MPI_Comm_split): see Communicator::split.
  std::unique_ptr<Communicator> split(int color, int key, std::string name, bool share_counters = true) override;
  /// Collective (MPI_Comm_idup): same group and nodes, its own message space.
  std::unique_ptr<Communicator> duplicate(std::string name, bool share_counters = true) override;
  /// Real: split(slot_of(rank())). Phantom: the members are the parent ranks whose slot has this rank's colour,
  /// in key order (ties by parent rank, as MPI_Comm_split orders them); no MPI call.
  std::unique_ptr<Communicator> split_by(const SlotOf& slot_of, std::string name, bool share_counters = true) override;

  static constexpr int kMaxUserTag = 4095;

  /// True for a communicator of a phantom world (make_phantom_world).
  bool phantom() const noexcept;

  // --- introspection (tests, the harness) ---------------------------------------------------------
  const MpiCommConfig& config() const noexcept;
  MPI_Comm mpi_comm() const noexcept;
  /// World rank and node of group rank r.
  int world_rank_of(int r) const;
  int node_of(int r) const;
  /// intra when group rank `peer` shares this rank's node.
  LinkLevel level_to(int peer) const;
  /// Bytes held by this communicator's persistent scratch pool (bf16 and reduction partials); it
  /// grows to what the calls need and then stays, so the steady state allocates no scratch.
  std::size_t scratch_bytes() const;
  /// The transport this communicator's intra-machine hops actually use: shm, or mpi (chosen, or
  /// the fallback of auto when shared memory was unavailable; also when no peer shares the machine).
  Transport transport() const noexcept;
  /// The smallest intra-machine message read straight from the sender's buffer (collectives.single_copy_bytes),
  /// or 0 when every message goes through the slots (off, refused by the kernel, or no shared memory).
  std::size_t single_copy_bytes() const noexcept;
  /// Whether messages from SharedBuffers are read from the sender's pages (collectives.mapped_buffers, and the
  /// machine's peers could map each other's buffers at setup).
  bool mapped_buffers() const noexcept;
  /// True once a deadline fired on this communicator; failure_reason() says which call.
  bool failed() const noexcept;
  std::string failure_reason() const;

 private:
  explicit MpiCommunicator(std::shared_ptr<detail::CommState> state);
  friend std::unique_ptr<MpiCommunicator> make_phantom_world(const Topology&, const MpiCommConfig&, int, std::string);
  // A phantom child (split_by, duplicate): members given by their world ranks, this rank at position `rank`.
  std::unique_ptr<Communicator> phantom_child(std::vector<int> world_ranks, int rank, std::string name,
                                              bool share_counters);
  Request start_all_to_allv_impl(CollOp op, ConstTensorView in, std::span<const std::int64_t> send_counts,
                                 TensorView out, std::span<const std::int64_t> recv_counts, StreamRef s);
  Request start_p2p(CollOp op, const std::byte* send_data, std::byte* recv_data, ConstTensorView buf, int peer,
                    int tag, StreamRef s);
  std::shared_ptr<detail::CommState> state_;
};

/// The usual way to build the world: `topology` from discover_topology(world, ranks_per_node)
/// (topology_mpi.hpp) or Topology::virtual_nodes. Collective over `world`.
/// A phantom world (docs/phantom.md): this process plays rank `rank` of the topology's W ranks, alone. Every call
/// runs this rank's algorithm dry (its bytes per level counted exactly as a real run's), does a local stand-in for
/// the data (src/phantom.hpp), and with links.emulate is held for the link model's time of
/// the whole group. No MPI call, ever; split() (one colour, no peers to ask) throws: use split_by().
std::unique_ptr<MpiCommunicator> make_phantom_world(const Topology& topology, const MpiCommConfig& config, int rank,
                                                    std::string name = "world");

std::unique_ptr<MpiCommunicator> make_mpi_world(const Topology& topology, const MpiCommConfig& config,
                                                MPI_Comm world = MPI_COMM_WORLD, std::string name = "world");

}  // namespace hzp::coll
