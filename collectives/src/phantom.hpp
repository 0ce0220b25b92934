// Phantom peers in the MPI backend (docs/phantom.md): the Operation of a call whose peers do not exist, and the
// local stand-in for the data the peers would have sent. The bytes, the algorithm and the link model are the real
// backend's (the same dry replay); only the data is made up here, so that buffers stay finite and are touched as
// a real transfer touches them. The stand-in runs on host buffers at once, or on device buffers enqueued on the
// call's CUDA stream (copies, fills and a scale kernel): one set of rules for both.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "comm_state.hpp"
#include "hzp/collectives/gpu_link_hold.hpp"
#include "hzp/core/stream.hpp"
#include "phantom_scale.hpp"

namespace hzp::coll::detail {

/// The call of a phantom communicator on host buffers: complete at once (the stand-in ran at start), its known
/// header being this rank's own (every phantom peer is taken to join when this rank does), its bytes those of this
/// rank's dry replay, marked modelled, its algorithm "phantom(model: <name>)".
std::unique_ptr<Operation> make_phantom_operation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes,
                                                  std::string_view modelled_algorithm);
/// The same call on device buffers: its stand-in (and, with emulated links, the hold of the link model's time) is
/// enqueued on `s`; it completes when `s` has passed them (an event recorded here). The hold, when given, spent the
/// modelled time on the stream, so its waiter sleeps nothing more (Operation::held_on_stream).
std::unique_ptr<Operation> make_phantom_stream_operation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes,
                                                         std::string_view modelled_algorithm, StreamRef s,
                                                         std::unique_ptr<GpuLinkHold> hold);

// ---- stand-in data: "every peer holds what this rank holds" ------------------------------------------------------
// A sum over p ranks is p times this rank's contribution; max and min are this rank's; a gathered block of another
// rank is a copy of this rank's block; an exchanged (all-to-all) block is what this rank sends itself; a received
// message is zeros. Values stay finite and of the real run's scale (a gradient summed over the group and divided by
// it is this rank's gradient, the loss the mean over this rank's micro-batches), and every output byte is written
// as the real transfer writes it.

/// Where a call's buffers live and the stream their stand-in goes on: host buffers with the host stream (done at
/// once), or device buffers with a CUDA stream of their device (enqueued).
struct Place {
  Device device = Device::cpu();
  StreamRef stream = StreamRef::host();
};

/// out block q = in for every q (in may be out's own block).
void phantom_all_gather(const std::byte* in, std::byte* out, std::size_t block_bytes, int rank, int p, Place at);
/// out = red over p copies of in's block `rank`.
void phantom_reduce_scatter(const std::byte* in, std::byte* out, std::int64_t n, const Reducer& red, int rank, int p,
                            Place at);
/// buf = red over p copies of buf.
void phantom_all_reduce(std::byte* buf, std::int64_t n, const Reducer& red, int p, Place at);
/// out block q (recv_counts[q] elements) = the first of in's block `rank` (what this rank sends itself: a peer that
/// holds and routes what this rank does sends it that), zeros past what it holds.
void phantom_all_to_allv(const std::byte* in, std::span<const std::int64_t> send_counts, std::byte* out,
                         std::span<const std::int64_t> recv_counts, std::size_t elem, int rank, Place at);
/// A received message: zeros.
void phantom_recv(std::byte* buf, std::size_t bytes, Place at);

/// x[i] = the sum of p copies of x[i] in x's dtype (p · x, rounded once for bf16): a phantom sum. On the host a loop,
/// on a device stream a kernel (phantom_scale.cu); p == 1 or n == 0 does nothing.
void sum_of_copies(std::byte* x, std::int64_t n, DType dtype, int p, Place at);

}  // namespace hzp::coll::detail
