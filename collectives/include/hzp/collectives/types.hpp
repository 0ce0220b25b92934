// Vocabulary of the collectives layer: operations, reductions, link levels, and the nccl-tests
// descriptor of each collective (bytes reported for algbw and the busbw factor, doc/PERFORMANCE.md
// of nccl-tests: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1,
// all_to_all (n-1)/n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hzp/core/dtype.hpp"

namespace hzp::coll {

enum class CollOp : std::uint8_t {
  all_gather,
  reduce_scatter,
  all_reduce,
  all_to_all,
  all_to_allv,
  broadcast,
  send,
  recv,
  barrier,
};
inline constexpr int kNumCollOps = 9;

enum class ReduceOp : std::uint8_t { sum, max, min };

/// Where bytes travel: inside a (virtual) node or across nodes.
enum class LinkLevel : std::uint8_t { intra, inter };
inline constexpr int kNumLinkLevels = 2;

std::string_view coll_op_name(CollOp op) noexcept;
std::string_view reduce_op_name(ReduceOp op) noexcept;
std::string_view link_level_name(LinkLevel level) noexcept;

/// nccl-tests convention: the byte count algbw is computed from, for an op whose per-rank
/// *input* holds `count` elements (all_gather: the shard; reduce_scatter: the full vector;
/// all_reduce/broadcast/all_to_all: the buffer).
std::size_t algbw_bytes(CollOp op, std::size_t count, DType dtype, int nranks) noexcept;
/// busbw = algbw * bus_factor: the factor that makes busbw comparable to link bandwidth.
double bus_factor(CollOp op, int nranks) noexcept;

}  // namespace hzp::coll
