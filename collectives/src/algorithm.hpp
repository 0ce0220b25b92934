// The shape every collective algorithm of the MPI backend takes: a sequence of rounds, each posting
// nonblocking sends and receives through a Poster, with local work (copies, reductions) between
// rounds. The live engine (p2p_operation.cpp) posts them to MPI; the model (link emulation, bytes
// of native collectives) replays the same algorithm "dry" to learn who sends what to whom, so the
// bytes counted and the bytes modelled come from one description.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "reduce_math.hpp"

namespace hzp::coll::detail {

/// Receives an algorithm's messages for one round.
class Poster {
 public:
  virtual ~Poster() = default;
  /// bytes == 0 sends only the timing header (barriers, empty blocks): both sides know the size. The
  /// algorithm may write `buf` again in a later round of this call: the send ends once the receiver has the bytes.
  virtual void send(const void* buf, std::size_t bytes, int peer) = 0;
  /// send(), for bytes this call never writes again: a transport whose receiver reads them in place (mapped, single
  /// copy) may end the send as soon as the receiver is told where they are, and the call waits for the reads only at
  /// its end, before the buffers are the caller's again (docs/collectives.md "Mapped buffers"). Each algorithm says
  /// why its kept sends are never written again; anything not proven uses send().
  virtual void send_kept(const void* buf, std::size_t bytes, int peer) { send(buf, bytes, peer); }
  virtual void recv(void* buf, std::size_t bytes, int peer) = 0;
  /// True when replaying for the model: buffers are null and local work must be skipped.
  virtual bool dry() const noexcept = 0;

  // Fused forms, offered where a hop's data streams through this process in chunks (the shared-memory
  // transport): the copy or reduction then happens on each chunk while it is in cache, saving a pass
  // over memory. An algorithm asks streams(peer) and otherwise uses send/recv plus its own local work.
  // Bytes on the wire (and so the counters) are those of the plain send/recv.
  virtual bool streams(int peer) const noexcept {
    (void)peer;
    return false;
  }
  /// send_kept(buf, bytes, peer), also copying the same bytes to copy_to (all_gather's own block, sent from the
  /// call's input, which the call never writes).
  virtual void send_and_copy(const void* buf, std::size_t bytes, int peer, void* copy_to);
  /// Receives n elements of type a_type from peer and stores red.combine(received, b) into dst: in
  /// red.acc, or rounded once to red.dtype when `finish` (the last step of a reduction).
  virtual void recv_reduce(void* dst, const void* b, DType a_type, DType b_type, std::size_t n, const Reducer& red,
                           bool finish, int peer);
};

/// One call's algorithm. Rounds are aligned across ranks by index: every rank of the group takes
/// the same number of steps (a rank idle in a round posts nothing in it).
class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string_view name() const noexcept = 0;
  /// Called with round = 0, 1, 2, ... after the previous round's messages completed: does the local
  /// work those messages enable, then posts round `round`. Returns false, posting nothing, once the
  /// algorithm is finished (its final local work done).
  virtual bool step(int round, Poster& p) = 0;
};

/// p nearly equal blocks of a vector of `total` elements: the first total % p blocks hold one more.
/// With total = p * n every block holds n (all_gather, reduce_scatter).
struct Blocks {
  std::int64_t total = 0;
  int p = 1;
  std::int64_t count(int j) const noexcept { return total / p + (j < total % p ? 1 : 0); }
  std::int64_t offset(int j) const noexcept {
    const std::int64_t base = total / p, rem = total % p;
    return j * base + (j < rem ? j : rem);
  }
  std::int64_t max_count() const noexcept { return count(0); }
};

/// base + bytes, or nullptr in a dry replay (no pointer arithmetic on null).
inline std::byte* at(std::byte* base, std::int64_t bytes) noexcept { return base ? base + bytes : nullptr; }
inline const std::byte* at(const std::byte* base, std::int64_t bytes) noexcept {
  return base ? base + bytes : nullptr;
}
inline int mod(int a, int p) noexcept { return ((a % p) + p) % p; }
/// Rounds of the doubling algorithms (Bruck, binomial tree, dissemination): the smallest k with 2^k >= p.
inline int ceil_log2(int p) noexcept {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

// ---- ring family (ring_algorithms.cpp) ---------------------------------------------------------------
/// out block j = rank j's block; own_in (may alias out's own block, or be null when already there)
/// is copied in first. p - 1 rounds, each sending one block to rank + 1.
std::unique_ptr<Algorithm> make_ring_all_gather(int rank, int p, std::byte* out, const std::byte* own_in,
                                                Blocks blocks, std::size_t elem);
/// out_own = reduction over ranks of block `rank` of `in`. p - 1 rounds; partial sums travel in the
/// accumulator type except on the first hop (a rank's own input). Scratch: ring_reduce_scratch_bytes.
std::unique_ptr<Algorithm> make_ring_reduce_scatter(int rank, int p, const std::byte* in, std::byte* out_own,
                                                    Blocks blocks, const Reducer& red, std::byte* scratch);
std::size_t ring_reduce_scratch_bytes(Blocks blocks, const Reducer& red);
/// In place: ring reduce-scatter into buf's own chunk, then ring all-gather of the chunks.
std::unique_ptr<Algorithm> make_ring_all_reduce(int rank, int p, std::byte* buf, std::int64_t n,
                                                const Reducer& red, std::byte* scratch);

// ---- latency-optimal family for small messages (small_message_algorithms.cpp) -----------------------
/// ceil(log2 p) rounds; any p. Same bytes per rank as the ring.
std::unique_ptr<Algorithm> make_bruck_all_gather(int rank, int p, std::byte* out, const std::byte* own_in,
                                                 std::int64_t n, std::size_t elem);
/// One round: every block goes straight to its owner, which reduces in rank order.
std::unique_ptr<Algorithm> make_direct_reduce_scatter(int rank, int p, const std::byte* in, std::byte* out,
                                                      std::int64_t n, const Reducer& red, std::byte* scratch);
std::size_t direct_reduce_scatter_scratch_bytes(int p, std::int64_t n, const Reducer& red);
/// log2 of the largest power of two <= p rounds, plus one before and one after when p is not a
/// power of two (the extra ranks fold into a partner first and get the result back last).
std::unique_ptr<Algorithm> make_recursive_doubling_all_reduce(int rank, int p, std::byte* buf, std::int64_t n,
                                                              const Reducer& red, std::byte* scratch);
std::size_t recursive_doubling_scratch_bytes(std::int64_t n, const Reducer& red);

// ---- exchanges, trees, barrier, point-to-point (exchange_algorithms.cpp) ----------------------------
/// Block q of `in` (send_counts[q] elements at send_offsets[q]) goes to rank q. Pairwise: p - 1
/// rounds, round k sending to rank + k; all_at_once: one round with every message.
std::unique_ptr<Algorithm> make_pairwise_all_to_allv(int rank, int p, const std::byte* in,
                                                     std::span<const std::int64_t> send_counts,
                                                     std::byte* out, std::span<const std::int64_t> recv_counts,
                                                     std::size_t elem, bool all_at_once);
/// ceil(log2 p) rounds: in round k the ranks that have the data (relative rank < 2^k) send it to
/// relative rank + 2^k.
std::unique_ptr<Algorithm> make_binomial_broadcast(int rank, int p, int root, std::byte* buf, std::size_t bytes);
/// ceil(log2 p) rounds of header-only messages to rank + 2^k.
std::unique_ptr<Algorithm> make_dissemination_barrier(int rank, int p);
/// One message.
std::unique_ptr<Algorithm> make_send(const std::byte* buf, std::size_t bytes, int peer);
std::unique_ptr<Algorithm> make_recv(std::byte* buf, std::size_t bytes, int peer);

}  // namespace hzp::coll::detail
