// The routed experts' GEMMs over expert-sorted rows (moe_expert_gemms.hpp).
#include "llama/moe_expert_gemms.hpp"

#include "hzp/kernels/swiglu.hpp"
#include "llama/llama_ops.hpp"
#include "llama/moe_rows.hpp"

namespace hzp::workloads::moe_gemms {

using llama::linear_bwd_data;
using llama::linear_bwd_weight;
using llama::linear_fwd;
using moe_rows::expert_matrix;
using moe_rows::rows;

void forward(const MoeExpertWeights& w, std::span<const std::int64_t> begin, Allocation& x, Allocation& g,
             Allocation& u, Allocation& a, Allocation& o, CachingAllocator& alloc, StreamRef s) {
  const std::int64_t experts = static_cast<std::int64_t>(begin.size()) - 1, total = begin.back() - begin.front();
  const std::int64_t d = w.w_gate.shape()[2], F = w.w_gate.shape()[1];
  const DType at = w.w_gate.dtype();
  const Device dev = w.w_gate.device();
  if (total == 0) return;
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::int64_t b = begin[static_cast<std::size_t>(e)], n = begin[static_cast<std::size_t>(e + 1)] - b;
    if (n == 0) continue;
    const TensorView xe = rows(x, b, n, d, at, dev);
    linear_fwd(rows(g, b, n, F, at, dev), xe, expert_matrix(w.w_gate, e), alloc, s);
    linear_fwd(rows(u, b, n, F, at, dev), xe, expert_matrix(w.w_up, e), alloc, s);
  }
  const std::int64_t first = begin.front();
  kernels::swiglu_fwd(rows(a, first, total, F, at, dev), rows(g, first, total, F, at, dev),
                      rows(u, first, total, F, at, dev), s);
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::int64_t b = begin[static_cast<std::size_t>(e)], n = begin[static_cast<std::size_t>(e + 1)] - b;
    if (n > 0) linear_fwd(rows(o, b, n, d, at, dev), rows(a, b, n, F, at, dev), expert_matrix(w.w_down, e), alloc, s);
  }
}

void backward(const MoeExpertWeights& w, const MoeExpertGrads& grads, std::span<const std::int64_t> begin,
              Allocation& dout, Allocation& x, Allocation& g, Allocation& u, Allocation& a, Allocation& dx,
              CachingAllocator& alloc, StreamRef s) {
  const std::int64_t experts = static_cast<std::int64_t>(begin.size()) - 1, total = begin.back() - begin.front();
  const std::int64_t d = w.w_gate.shape()[2], F = w.w_gate.shape()[1];
  const DType at = w.w_gate.dtype();
  const Device dev = w.w_gate.device();
  if (total == 0) return;
  Allocation da = alloc.allocate(static_cast<std::size_t>((begin.back()) * F) * dtype_size(at), AllocationTag::workspace);
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::int64_t b = begin[static_cast<std::size_t>(e)], n = begin[static_cast<std::size_t>(e + 1)] - b;
    if (n == 0) continue;
    const TensorView doe = rows(dout, b, n, d, at, dev);
    linear_bwd_weight(expert_matrix(grads.w_down, e), doe, rows(a, b, n, F, at, dev), true, alloc, s);
    linear_bwd_data(rows(da, b, n, F, at, dev), doe, expert_matrix(w.w_down, e), false, alloc, s);
  }
  a.reset();
  // dgate and dup overwrite gate and up (the kernel reads each element before writing it).
  const std::int64_t first = begin.front();
  const TensorView gv = rows(g, first, total, F, at, dev), uv = rows(u, first, total, F, at, dev);
  kernels::swiglu_bwd(gv, uv, rows(da, first, total, F, at, dev), gv, uv, s);
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::int64_t b = begin[static_cast<std::size_t>(e)], n = begin[static_cast<std::size_t>(e + 1)] - b;
    if (n == 0) continue;
    const TensorView dge = rows(g, b, n, F, at, dev), due = rows(u, b, n, F, at, dev);
    const TensorView xe = rows(x, b, n, d, at, dev), dxe = rows(dx, b, n, d, at, dev);
    linear_bwd_weight(expert_matrix(grads.w_gate, e), dge, xe, true, alloc, s);
    linear_bwd_weight(expert_matrix(grads.w_up, e), due, xe, true, alloc, s);
    linear_bwd_data(dxe, dge, expert_matrix(w.w_gate, e), false, alloc, s);
    linear_bwd_data(dxe, due, expert_matrix(w.w_up, e), true, alloc, s);
  }
}

}  // namespace hzp::workloads::moe_gemms
