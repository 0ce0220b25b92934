// Phantom peers in the MPI backend (docs/phantom.md): the Operation of a call whose peers do not exist, and the
// local stand-in for the data the peers would have sent. The bytes, the algorithm and the link model are the real
// backend's (the same dry replay); only the data is made up here, so that buffers stay finite and are touched as
// a real transfer touches them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "comm_state.hpp"

namespace hzp::coll::detail {

/// The call of a phantom communicator: complete at once (the stand-in ran at start), its known header being this
/// rank's own (every phantom peer is taken to join when this rank does), its bytes those of this rank's dry
/// replay, marked modelled, its algorithm "phantom(model: <name>)".
std::unique_ptr<Operation> make_phantom_operation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes,
                                                  std::string_view modelled_algorithm);

// ---- stand-in data: "every peer holds what this rank holds" ------------------------------------------------------
// A sum over p ranks is p times this rank's contribution; max and min are this rank's; a gathered block of another
// rank is a copy of this rank's block; an exchanged (all-to-all) block is what this rank sends itself; a received
// message is zeros. Values stay finite and of the real run's scale (a gradient summed over the group and divided by
// it is this rank's gradient, the loss the mean over this rank's micro-batches), and every output byte is written
// as the real transfer writes it.

/// out block q = in for every q (in may be out's own block).
void phantom_all_gather(const std::byte* in, std::byte* out, std::size_t block_bytes, int rank, int p);
/// out = red over p copies of in's block `rank`.
void phantom_reduce_scatter(const std::byte* in, std::byte* out, std::int64_t n, const Reducer& red, int rank, int p);
/// buf = red over p copies of buf.
void phantom_all_reduce(std::byte* buf, std::int64_t n, const Reducer& red, int p);
/// out block q (recv_counts[q] elements) = the first of in's block `rank` (what this rank sends itself: a peer that
/// holds and routes what this rank does sends it that), zeros past what it holds.
void phantom_all_to_allv(const std::byte* in, std::span<const std::int64_t> send_counts, std::byte* out,
                         std::span<const std::int64_t> recv_counts, std::size_t elem, int rank);

}  // namespace hzp::coll::detail
