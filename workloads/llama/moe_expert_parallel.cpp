// Expert parallelism for the routed experts of an MoE layer (moe.hpp: moe_expert_parallel_forward / _backward).
// Rank p of the ep group holds experts p·E/P .. (p+1)·E/P − 1, so a routing's expert-sorted slots are already
// grouped by the rank that runs them: the slots go out in that order with one all-to-all-v, after an all-to-all
// of the row counts per (rank, local expert) so every receiver can size and cut what arrives. What arrives is
// source-major (all of rank 0's rows, then rank 1's, each source's in its expert order); it is reordered
// expert-major so that each local expert is one GEMM over every row it got (a grouped GEMM as a loop over the
// rank's experts), and the outputs are reordered back and returned by the mirrored all-to-all-v into the sender's
// own slots. Backward mirrors both exchanges: the outputs' gradients go out the way the inputs went, the inputs'
// gradients come back the way the outputs came. Routing, capacity and the gated combination stay on the
// sender (moe_experts.cpp), so they are exactly the single-rank model's.
#include <cstring>
#include <numeric>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/workloads/moe.hpp"
#include "llama/moe_expert_gemms.hpp"
#include "llama/moe_rows.hpp"

namespace hzp::workloads {
namespace {


// The row counts of one exchange: sent[p·El + i] rows of this rank to rank p's local expert i, received[p·El + i]
// rows of source p for this rank's local expert i.
class Counts {
 public:
  Counts(const MoeSaved::Exchange& ex, int ranks)
      : ex_(ex), P_(ranks), El_(static_cast<std::int64_t>(ex.sent.size()) / ranks) {}
  std::int64_t local_experts() const noexcept { return El_; }
  std::int64_t received(int p, std::int64_t i) const { return ex_.received[idx(p, i)]; }
  std::int64_t received_total() const {
    return std::accumulate(ex_.received.begin(), ex_.received.end(), std::int64_t{0});
  }
  // all_to_allv's element counts per rank for rows of `width`: what this rank sends when it dispatches (sending =
  // true; also what comes back in the combine) or receives.
  std::vector<std::int64_t> elements(std::int64_t width, bool dispatched) const {
    const std::vector<std::int64_t>& v = dispatched ? ex_.sent : ex_.received;
    std::vector<std::int64_t> out(static_cast<std::size_t>(P_), 0);
    for (int p = 0; p < P_; ++p)
      for (std::int64_t i = 0; i < El_; ++i) out[static_cast<std::size_t>(p)] += v[idx(p, i)] * width;
    return out;
  }
  // First row of source p's rows for local expert i in the arrival (source-major) order and in the expert-major one.
  std::int64_t source_major(int p, std::int64_t i) const {
    std::int64_t at = 0;
    for (int q = 0; q < p; ++q)
      for (std::int64_t j = 0; j < El_; ++j) at += received(q, j);
    for (std::int64_t j = 0; j < i; ++j) at += received(p, j);
    return at;
  }
  std::int64_t expert_major(std::int64_t i, int p) const {
    std::int64_t at = 0;
    for (std::int64_t j = 0; j < i; ++j)
      for (int q = 0; q < P_; ++q) at += received(q, j);
    for (int q = 0; q < p; ++q) at += received(q, i);
    return at;
  }
  // Where each local expert's rows start in the expert-major order ([local experts + 1]: the grouped GEMMs' cut).
  std::vector<std::int64_t> expert_begin() const {
    std::vector<std::int64_t> out(static_cast<std::size_t>(El_ + 1), 0);
    for (std::int64_t i = 0; i < El_; ++i) {
      out[static_cast<std::size_t>(i + 1)] = out[static_cast<std::size_t>(i)];
      for (int q = 0; q < P_; ++q) out[static_cast<std::size_t>(i + 1)] += received(q, i);
    }
    return out;
  }
  int ranks() const noexcept { return P_; }

 private:
  std::size_t idx(int p, std::int64_t i) const { return static_cast<std::size_t>(p * El_ + i); }
  const MoeSaved::Exchange& ex_;
  int P_;
  std::int64_t El_;
};

// Copies the received rows between the arrival order and the expert-major order (either way).
void reorder(const Counts& c, const Allocation& from, Allocation& to, std::int64_t width, std::size_t esz,
             bool to_expert_major) {
  for (int p = 0; p < c.ranks(); ++p)
    for (std::int64_t i = 0; i < c.local_experts(); ++i) {
      const std::int64_t n = c.received(p, i);
      if (n == 0) continue;
      const std::int64_t src = to_expert_major ? c.source_major(p, i) : c.expert_major(i, p);
      const std::int64_t dst = to_expert_major ? c.expert_major(i, p) : c.source_major(p, i);
      std::memcpy(static_cast<std::byte*>(to.data()) + dst * width * static_cast<std::int64_t>(esz),
                  static_cast<const std::byte*>(from.data()) + src * width * static_cast<std::int64_t>(esz),
                  static_cast<std::size_t>(n * width) * esz);
    }
}

// At least one row, so that a rank that sends or receives nothing still holds a valid buffer.
Allocation rows_buffer(CachingAllocator& alloc, std::int64_t n, std::int64_t width, DType dt, AllocationTag tag) {
  return alloc.allocate(static_cast<std::size_t>(std::max<std::int64_t>(n, 1) * width) * dtype_size(dt), tag);
}

// One all-to-all-v of rows, waited on here (the communicator's deadline applies) and timed as a communication wait.
void exchange(coll::Communicator& ep, const void* in, std::int64_t in_rows, std::span<const std::int64_t> send,
              void* out, std::int64_t out_rows, std::span<const std::int64_t> recv, std::int64_t width, DType dt,
              StreamRef s) {
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "ep all_to_allv");
  ep.start_all_to_allv(ConstTensorView(in, Shape{in_rows, width}, dt), send, TensorView(out, Shape{out_rows, width}, dt),
                       recv, s)
      .wait();
}

}  // namespace

void moe_expert_parallel_forward(const MoeConfig& c, ConstTensorView h, const MoeExpertWeights& w, MoeSaved& saved,
                                 CachingAllocator& alloc, StreamRef s, coll::Communicator& ep) {
  const int P = ep.size();
  const std::int64_t E = c.experts, d = h.shape()[1], F = c.expert_ffn, N = h.shape()[0];
  HZP_CHECK(E % P == 0 && w.w_gate.shape()[0] == E / P, "MoE expert parallelism: ", E, " experts over an ep group of ",
            P, " ranks need ", E / P, " local experts per rank; the weights hold ", w.w_gate.shape()[0]);
  const DType at = h.dtype();
  const std::size_t esz = dtype_size(at);
  const MoeRouting& r = saved.routing;
  const std::int64_t kept = r.kept();

  // The counts first: how many of this rank's kept rows go to each rank's each expert.
  MoeSaved::Exchange& ex = saved.exchange;
  ex.sent.assign(static_cast<std::size_t>(E), 0);
  ex.received.assign(static_cast<std::size_t>(E), 0);
  for (std::int64_t e = 0; e < E; ++e)
    ex.sent[static_cast<std::size_t>(e)] = r.offsets[static_cast<std::size_t>(e + 1)] - r.offsets[static_cast<std::size_t>(e)];
  {
    const profile::ScopedPhase phase(profile::Phase::comm_wait, "ep all_to_all counts");
    ep.all_to_all(ConstTensorView(ex.sent.data(), Shape{E}, DType::i64),
                  TensorView(ex.received.data(), Shape{E}, DType::i64), StreamRef::host());
  }
  const Counts counts(ex, P);
  const std::int64_t R = counts.received_total();

  // Dispatch: the kept rows of h in slot order (already grouped by destination rank).
  Allocation arrived = rows_buffer(alloc, R, d, at, AllocationTag::workspace);
  {
    Allocation out = rows_buffer(alloc, kept, d, at, AllocationTag::workspace);
    moe_rows::gather_kept_rows(out, h, r);
    exchange(ep, out.data(), kept, counts.elements(d, true), arrived.data(), R, counts.elements(d, false), d, at, s);
  }
  saved.x = rows_buffer(alloc, R, d, at, AllocationTag::activation);
  reorder(counts, arrived, saved.x, d, esz, /*to_expert_major=*/true);

  // This rank's experts, each one GEMM per projection over every row it got.
  saved.g = rows_buffer(alloc, R, F, at, AllocationTag::activation);
  saved.u = rows_buffer(alloc, R, F, at, AllocationTag::activation);
  saved.a = rows_buffer(alloc, R, F, at, AllocationTag::activation);
  Allocation o = rows_buffer(alloc, R, d, at, AllocationTag::workspace);
  moe_gemms::forward(w, counts.expert_begin(), saved.x, saved.g, saved.u, saved.a, o, alloc, s);

  // Combine: the outputs back to their senders, into the slots their rows left from (sized as on one rank).
  reorder(counts, o, arrived, d, esz, /*to_expert_major=*/false);
  saved.o = rows_buffer(alloc, N * c.top_k, d, at, AllocationTag::activation);
  exchange(ep, arrived.data(), R, counts.elements(d, false), saved.o.data(), kept, counts.elements(d, true), d, at, s);
}

void moe_expert_parallel_backward(const MoeConfig& c, const MoeExpertWeights& w, const MoeExpertGrads& g,
                                  ConstTensorView dout, TensorView dx, MoeSaved& saved, CachingAllocator& alloc,
                                  StreamRef s, coll::Communicator& ep) {
  const std::int64_t d = dout.shape()[1], kept = dout.shape()[0];
  const DType at = dout.dtype();
  const std::size_t esz = dtype_size(at);
  const Counts counts(saved.exchange, ep.size());
  const std::int64_t R = counts.received_total();

  // The outputs' gradients go where the rows went.
  Allocation arrived = rows_buffer(alloc, R, d, at, AllocationTag::workspace);
  exchange(ep, dout.data(), kept, counts.elements(d, true), arrived.data(), R, counts.elements(d, false), d, at, s);
  Allocation dO = rows_buffer(alloc, R, d, at, AllocationTag::workspace);
  reorder(counts, arrived, dO, d, esz, /*to_expert_major=*/true);

  // This rank's experts: every local expert's gradient is written, one that got no rows included.
  const DType gt = g.w_gate.dtype();
  if (!g.accumulate)
    for (const TensorView& t : {g.w_gate, g.w_up, g.w_down})
      std::memset(t.data(), 0, static_cast<std::size_t>(t.numel()) * dtype_size(gt));
  Allocation dxe_all = rows_buffer(alloc, R, d, at, AllocationTag::workspace);
  moe_gemms::backward(w, g, counts.expert_begin(), dO, saved.x, saved.g, saved.u, saved.a, dxe_all, alloc, s);
  saved.x.reset();
  saved.g.reset();
  saved.u.reset();

  // The inputs' gradients come back the way the outputs did.
  reorder(counts, dxe_all, arrived, d, esz, /*to_expert_major=*/false);
  exchange(ep, arrived.data(), R, counts.elements(d, false), dx.data(), kept, counts.elements(d, true), d, at, s);
}

}  // namespace hzp::workloads
