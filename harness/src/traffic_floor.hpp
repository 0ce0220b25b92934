// The traffic floor of a collective: the least memory traffic any algorithm must cause on one rank to produce the
// op's result on this machine, run as plain loops on every rank at once. Its time is the benchmark's physical
// reference per op and size (docs/collectives-benchmark.md, "The traffic floor"). The rule: every byte of the
// rank's input is read once from its memory and every byte of its output written once; what passes from rank to
// rank goes through the caches the ranks share (a slot-sized staging piece here, as the shared-memory rings do), so
// it costs no memory traffic of its own. Unlike the single-core memcpy reference, the floor counts what the op itself
// must move (an out-of-place all_gather writes its whole output; a reduction reads every contribution) and that the
// ranks share the memory bus.
#pragma once

#include <cstddef>

#include "hzp/collectives/communicator.hpp"

namespace hzp::harness {

/// The staging piece that stands for the bytes other ranks deliver through the caches.
inline constexpr std::size_t kFloorStagingBytes = 256u << 10;

/// Per op, on rank `rank` of `w`, with `total` elements of `dtype` (the sweep size; for all_gather the output, for
/// reduce_scatter the input, for all_reduce, all_to_all and broadcast the buffer), block = total / w:
/// - all_gather: src's `block` elements (the rank's input) copied to dst's block `rank`; the other blocks written
///   from the staging piece (the peers' blocks arriving through the caches);
/// - all_to_all: `total` elements copied src -> dst (each block of the input is read once, by whoever sends it,
///   and each block of the output written once);
/// - broadcast: the root reads its `total` elements into the staging piece; every other rank writes its `total`
///   elements from it;
/// - reduce_scatter: dst[i] = sum over q of src[q*block + i], i < block (every contribution read once where it
///   lies, the result written once; fp32 accumulation, rounded once for bf16);
/// - all_reduce: that sum into dst's block `rank`; the other blocks written from the staging piece.
/// src and dst hold at least `total` elements and do not overlap; the staging piece is zero, so the blocks written
/// from it are zero. Results are real (tested), so no part of the work can be optimised away.
void run_traffic_floor(coll::CollOp op, DType dtype, std::size_t total, int w, int rank, int root,
                       const std::byte* src, std::byte* dst);

}  // namespace hzp::harness
