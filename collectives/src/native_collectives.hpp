// The native-collective Operation (collectives.mpi_native = true): a description of the call, and
// the factory that starts the MPICH nonblocking collective for it.
#pragma once

#include <span>
#include <string_view>

#include "comm_state.hpp"

namespace hzp::coll::detail {

/// One native call. Buffers are the user's; `out` is also the in-place buffer of all_reduce and
/// broadcast.
struct NativeCall {
  CollOp op = CollOp::barrier;
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
  std::int64_t count = 0;   // elements: all_gather shard, reduce_scatter output, all_reduce buffer
  std::size_t bytes = 0;    // all_gather shard bytes, broadcast bytes
  std::size_t elem = 1;
  int root = 0;
  bool reduces = false;
  Reducer red{};
  std::span<const std::int64_t> send_counts{}, recv_counts{};  // all_to_all(v), elements per rank
};

/// fp32 scratch needed to reduce bf16 through MPI in fp32.
std::size_t native_scratch_bytes(const NativeCall& call, int p);
/// Starts the MPI collective and its join-time companion before returning.
std::unique_ptr<Operation> make_native_operation(CommState& st, const NativeCall& call, Header own,
                                                 ScratchPool::Lease scratch,
                                                 std::array<std::uint64_t, kNumLinkLevels> modelled_bytes,
                                                 std::string_view algorithm);

}  // namespace hzp::coll::detail
