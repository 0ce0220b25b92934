// Where the attention GEMMs of the CUDA twins (attention.cu, attention_blocks.cu) find their operands: the
// strided batches over the KV heads for one (sequence b, group member j), so grouped-query heads need no copies
// (query head h = g·group + j reads kv head g). The whole-sequence kernels are the case Tq = Tk = T. Also the
// workspace alignment both keep.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {

/// Workspace pieces start on 256-byte boundaries (cuBLASLt's preferred alignment); sizes include the slack.
constexpr std::size_t kAlign = 256;
inline std::size_t up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// The sizes of a (query rows, key rows) pair: queries [B, Tq, H, D], keys and values [B, Tk, KV, D].
struct PairGeometry {
  std::int64_t B, Tq, Tk, H, KV, D, grp;
};

/// Query head g·grp + j of sequence b, for every kv head g: [Tq, D] matrices of ld H·D, grp·D apart. Also
/// the layout of out, dout, dq and the blocked forward's fp32 accumulator.
inline MatrixDesc query_heads(const void* base, DType t, const PairGeometry& g, std::int64_t b, std::int64_t j) {
  const std::int64_t off = b * g.Tq * g.H * g.D + j * g.D;
  return {static_cast<const std::byte*>(base) + off * static_cast<std::int64_t>(dtype_size(t)), t, g.Tq, g.D,
          g.H * g.D, g.grp * g.D};
}

/// Every kv head g of sequence b: [Tk, D] matrices of ld KV·D, D apart (k, v, dk, dv).
inline MatrixDesc kv_heads(const void* base, DType t, const PairGeometry& g, std::int64_t b) {
  const std::int64_t off = b * g.Tk * g.KV * g.D;
  return {static_cast<const std::byte*>(base) + off * static_cast<std::int64_t>(dtype_size(t)), t, g.Tk, g.D,
          g.KV * g.D, g.D};
}

/// A [KV, Tq, Tk] buffer of scores or probabilities as KV matrices [Tq, Tk] whose rows are `ld` elements apart.
inline MatrixDesc score_rows(const void* base, DType t, const PairGeometry& g, std::int64_t ld) {
  return {base, t, g.Tq, g.Tk, ld, g.Tq * ld};
}

}  // namespace hzp::kernels::cuda
