// Names of collective operations and levels, and the nccl-tests algbw/busbw descriptor.
#include "hzp/collectives/types.hpp"

namespace hzp::coll {

std::string_view coll_op_name(CollOp op) noexcept {
  switch (op) {
    case CollOp::all_gather: return "all_gather";
    case CollOp::reduce_scatter: return "reduce_scatter";
    case CollOp::all_reduce: return "all_reduce";
    case CollOp::all_to_all: return "all_to_all";
    case CollOp::all_to_allv: return "all_to_allv";
    case CollOp::broadcast: return "broadcast";
    case CollOp::send: return "send";
    case CollOp::recv: return "recv";
    case CollOp::barrier: return "barrier";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

std::string_view link_level_name(LinkLevel level) noexcept {
  return level == LinkLevel::intra ? "intra" : "inter";
}

std::size_t algbw_bytes(CollOp op, std::size_t count, DType dtype, int nranks) noexcept {
  const std::size_t bytes = count * dtype_size(dtype);
  // nccl-tests reports the size of the larger buffer: the gathered output of all_gather,
  // the full input of reduce_scatter.
  if (op == CollOp::all_gather) return bytes * static_cast<std::size_t>(nranks);
  return bytes;
}

double bus_factor(CollOp op, int nranks) noexcept {
  const double n = nranks;
  switch (op) {
    case CollOp::all_reduce: return nranks > 1 ? 2.0 * (n - 1) / n : 0.0;
    case CollOp::all_gather:
    case CollOp::reduce_scatter:
    case CollOp::all_to_all:
    case CollOp::all_to_allv: return nranks > 1 ? (n - 1) / n : 0.0;
    case CollOp::broadcast:
    case CollOp::send:
    case CollOp::recv: return 1.0;
    case CollOp::barrier: return 0.0;
  }
  return 0.0;
}

}  // namespace hzp::coll
