// The traffic floor's loops (traffic_floor.hpp): copies, writes from a cache-resident staging piece, and a blocked
// reduction of w arrays that reads each input element once and writes each output element once.
#include "traffic_floor.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

template <typename T>
float widen(T v) {
  if constexpr (std::is_same_v<T, bf16>) return v.to_float();  // a shift: vectorises
  else return v;
}
template <typename T>
T narrow(float v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16::from_float(v);
  else return v;
}

// dst[i] = sum_q src[q*stride + i] for i < n. A piece of the output is accumulated in a small fp32
// buffer that stays in L1, so each input element is read once and each output element written once
// (an accumulate-into-dst loop would read dst w-1 times).
template <typename T>
void reduce_blocks(const T* src, std::size_t stride, int w, std::size_t n, T* dst) {
  constexpr std::size_t kPiece = 2048;
  std::array<float, kPiece> acc;
  for (std::size_t i0 = 0; i0 < n; i0 += kPiece) {
    const std::size_t m = std::min(kPiece, n - i0);
    const T* s0 = src + i0;
    for (std::size_t i = 0; i < m; ++i) acc[i] = widen(s0[i]);
    for (int q = 1; q < w; ++q) {
      const T* sq = src + static_cast<std::size_t>(q) * stride + i0;
      for (std::size_t i = 0; i < m; ++i) acc[i] += widen(sq[i]);
    }
    for (std::size_t i = 0; i < m; ++i) dst[i0 + i] = narrow<T>(acc[i]);
  }
}

// The staging piece: zero, one per thread, small enough to stay in cache between uses.
std::byte* staging() {
  alignas(64) thread_local std::array<std::byte, kFloorStagingBytes> piece{};
  return piece.data();
}

// Writes n bytes at dst from the staging piece: what a peer's block costs the receiver once its bytes arrive
// through the shared caches.
void write_from_staging(std::byte* dst, std::size_t n) {
  const std::byte* s = staging();
  for (std::size_t at = 0; at < n; at += kFloorStagingBytes)
    std::memcpy(dst + at, s, std::min(kFloorStagingBytes, n - at));
}

// Reads n bytes at src into the staging piece: what sending a block costs its sender.
void read_into_staging(const std::byte* src, std::size_t n) {
  std::byte* s = staging();
  for (std::size_t at = 0; at < n; at += kFloorStagingBytes)
    std::memcpy(s, src + at, std::min(kFloorStagingBytes, n - at));
  std::memset(s, 0, kFloorStagingBytes);  // back to zero, as the contract says (in cache: cheap)
}

template <typename T>
void floor_typed(coll::CollOp op, std::size_t total, int w, int rank, int root, const T* src, T* dst) {
  const std::size_t block = total / static_cast<std::size_t>(w), own = static_cast<std::size_t>(rank) * block;
  auto* out = reinterpret_cast<std::byte*>(dst);
  // The blocks around the rank's own, written as the peers' deliveries.
  auto others_from_staging = [&] {
    write_from_staging(out, own * sizeof(T));
    write_from_staging(out + (own + block) * sizeof(T), (total - own - block) * sizeof(T));
  };
  switch (op) {
    case coll::CollOp::all_gather:
      std::memcpy(dst + own, src, block * sizeof(T));
      others_from_staging();
      return;
    case coll::CollOp::all_to_all: std::memcpy(dst, src, total * sizeof(T)); return;
    case coll::CollOp::broadcast:
      if (rank == root) read_into_staging(reinterpret_cast<const std::byte*>(src), total * sizeof(T));
      else write_from_staging(out, total * sizeof(T));
      return;
    case coll::CollOp::reduce_scatter: reduce_blocks(src, block, w, block, dst); return;
    case coll::CollOp::all_reduce:
      reduce_blocks(src, block, w, block, dst + own);  // every rank's contribution to this block
      others_from_staging();
      return;
    default: HZP_THROW(PreconditionError, "no traffic floor for ", coll::coll_op_name(op));
  }
}

}  // namespace

void run_traffic_floor(coll::CollOp op, DType dtype, std::size_t total, int w, int rank, int root,
                       const std::byte* src, std::byte* dst) {
  HZP_CHECK(w >= 1 && rank >= 0 && rank < w, "traffic floor: rank ", rank, " of ", w);
  if (dtype == DType::bf16)
    floor_typed(op, total, w, rank, root, reinterpret_cast<const bf16*>(src), reinterpret_cast<bf16*>(dst));
  else if (dtype == DType::f32)
    floor_typed(op, total, w, rank, root, reinterpret_cast<const float*>(src), reinterpret_cast<float*>(dst));
  else
    HZP_THROW(PreconditionError, "traffic floor: dtype ", dtype_name(dtype), " (fp32 or bf16)");
}

}  // namespace hzp::harness
