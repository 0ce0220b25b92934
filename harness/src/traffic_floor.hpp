// The traffic floor of a collective: the least local memory work any algorithm must do on one rank to
// produce the op's result on this machine, run as plain loops on every rank at once. Its time is the
// benchmark's physical reference per op and size (docs/collectives-benchmark.md, "The traffic floor"):
// a transport that reads each peer byte once, straight from the peer's buffer, and writes each result
// byte once, with every rank of the machine doing so at the same moment, cannot beat it. Unlike the
// single-core memcpy reference, it counts what the op itself must move (an out-of-place all_gather
// writes its whole output; a reduction reads every rank's contribution) and that the ranks share the
// memory bus.
#pragma once

#include <cstddef>

#include "hzp/collectives/communicator.hpp"

namespace hzp::harness {

/// Per op, on rank `rank` of `w`, with `total` elements of `dtype` (the sweep size; for all_gather the
/// output, for reduce_scatter the input, for all_reduce, all_to_all and broadcast the buffer):
/// - all_gather, all_to_all: copy `total` elements src -> dst (every output byte written once from a
///   source byte read once);
/// - broadcast: the same copy on every rank but the root (which moves nothing);
/// - reduce_scatter: dst[i] = sum over q of src[q*block + i], i < block = total / w (every rank's
///   contribution read once, the result written once; fp32 accumulation, rounded once for bf16);
/// - all_reduce: that reduction into dst's own block `rank`, then the other w-1 blocks copied src -> dst
///   (the reduce-scatter phase, then the all-gather phase, each at its floor).
/// `src` and `dst` hold at least `total` elements and do not overlap. Results are real (tested), so no
/// part of the work can be optimised away.
void run_traffic_floor(coll::CollOp op, DType dtype, std::size_t total, int w, int rank, int root,
                       const std::byte* src, std::byte* dst);

}  // namespace hzp::harness
