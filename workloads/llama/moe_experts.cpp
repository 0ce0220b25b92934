// The routed experts of an MoE layer, forward and backward on the host (moe.hpp): the router's matmul, the
// routing, the tokens gathered into expert-sorted rows so that each expert is three GEMMs over its rows (the
// same linear layers and SwiGLU kernel as the dense MLP), and the gated combination back into token order.
// Combination and scatter run token by token in the choice order, so the result does not depend on how the
// experts' rows happen to be laid out.
#include <cstring>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/kernels/scalar.hpp"
#include "hzp/kernels/swiglu.hpp"
#include "hzp/workloads/moe.hpp"
#include "hzp/collectives/communicator.hpp"
#include "llama/llama_ops.hpp"
#include "llama/moe_expert_gemms.hpp"
#include "llama/moe_rows.hpp"

namespace hzp::workloads {
namespace {

using llama::linear_bwd_data;
using llama::linear_bwd_weight;
using llama::linear_fwd;

using moe_rows::expert_matrix;
using moe_rows::gather_kept_rows;
using moe_rows::rows;

std::vector<double> to_doubles(ConstTensorView v) {
  std::vector<double> out(static_cast<std::size_t>(v.numel()));
  kernels::dispatch_float(v.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(v.data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(kernels::load(p[i]));
  });
  return out;
}

void check_host(ConstTensorView h, StreamRef s) {
  HZP_CHECK(!h.device().is_cuda() && !s.device().is_cuda(), "the MoE layer runs on the host only (model.experts > 0 is "
            "refused on backend = cuda)");
}

}  // namespace

void MoeSaved::reset() noexcept {
  for (Allocation* m : {&g, &u, &a, &o, &x}) m->reset();
  routing = MoeRouting{};
  exchange = Exchange{};
  aux = aux_weight = 0;
}

std::int64_t moe_saved_bytes(const MoeConfig& c, std::int64_t tokens, std::int64_t hidden, DType act) noexcept {
  const std::int64_t rows = tokens * c.top_k;
  return rows * (3 * c.expert_ffn + hidden) * static_cast<std::int64_t>(dtype_size(act));
}

void moe_experts_forward(const MoeConfig& c, ConstTensorView h_all, const MoeExpertWeights& w,
                         std::span<const double> bias, double aux_weight, TensorView y, MoeSaved& saved,
                         CachingAllocator& alloc, StreamRef s, coll::Communicator* ep, MoeTokenRows rows) {
  check_host(h_all, s);
  if (ep != nullptr && ep->size() == 1) ep = nullptr;
  const std::int64_t N_all = h_all.shape()[0], d = h_all.shape()[1], E = c.experts, F = c.expert_ffn, k = c.top_k;
  const DType at = h_all.dtype();
  const Device dev = h_all.device();
  saved.reset();
  {
    // Every token is routed (on every rank of a tensor-parallel group alike), so capacity and the auxiliary loss
    // are the whole micro-batch's whichever rows this rank then runs.
    Allocation z = alloc.allocate(static_cast<std::size_t>(N_all * E) * dtype_size(at), AllocationTag::workspace);
    const TensorView logits(z.data(), Shape{N_all, E}, at, dev);
    linear_fwd(logits, h_all, w.router, alloc, s);
    saved.routing = route_tokens(c, to_doubles(logits), bias, N_all);
  }
  if (c.balance == MoeBalance::aux_loss) saved.aux = aux_loss_of(c, saved.routing);
  saved.aux_weight = aux_weight;
  if (!rows.all()) saved.routing = restrict_routing(saved.routing, rows.begin, rows.end);
  const MoeRouting& r = saved.routing;
  const std::int64_t N = r.tokens;
  const ConstTensorView h = rows.all() ? h_all
                                       : ConstTensorView(static_cast<const std::byte*>(h_all.data()) +
                                                             rows.begin * d * static_cast<std::int64_t>(dtype_size(at)),
                                                         Shape{N, d}, at, dev);

  const std::size_t esz = dtype_size(at);
  const std::int64_t rows_all = N * k;
  if (ep != nullptr) {
    // The experts run on their own ranks; saved.o comes back with their outputs in this rank's slots.
    moe_expert_parallel_forward(c, h, w, saved, alloc, s, *ep);
  } else {
    saved.g = alloc.allocate(static_cast<std::size_t>(rows_all * F) * esz, AllocationTag::activation);
    saved.u = alloc.allocate(static_cast<std::size_t>(rows_all * F) * esz, AllocationTag::activation);
    saved.a = alloc.allocate(static_cast<std::size_t>(rows_all * F) * esz, AllocationTag::activation);
    saved.o = alloc.allocate(static_cast<std::size_t>(rows_all * d) * esz, AllocationTag::activation);
    Allocation x = alloc.allocate(static_cast<std::size_t>(rows_all * d) * esz, AllocationTag::workspace);
    gather_kept_rows(x, h, r);
    moe_gemms::forward(w, r.offsets, x, saved.g, saved.u, saved.a, saved.o, alloc, s);
  }
  if (y.data() == nullptr) return;
  kernels::dispatch_float(at, [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::acc_t<T>;
    T* yp = static_cast<T*>(y.data());
    const T* op = static_cast<const T*>(saved.o.data());
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t i = 0; i < d; ++i) {
        A sum = kernels::load(yp[t * d + i]);
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t slot = r.slot[static_cast<std::size_t>(t * k + j)];
          if (slot >= 0) sum += static_cast<A>(r.gate[static_cast<std::size_t>(t * k + j)]) * kernels::load(op[slot * d + i]);
        }
        yp[t * d + i] = kernels::store<T>(sum);
      }
  });
}

void moe_experts_backward(const MoeConfig& c, ConstTensorView dy, ConstTensorView h, const MoeExpertWeights& w,
                          const MoeExpertGrads& g, TensorView dh, MoeSaved& saved, CachingAllocator& alloc,
                          StreamRef s, coll::Communicator* ep) {
  check_host(h, s);
  if (ep != nullptr && ep->size() == 1) ep = nullptr;
  HZP_CHECK(saved.held(), "MoE backward: its forward state is missing");
  const std::int64_t N = h.shape()[0], d = h.shape()[1], E = c.experts, k = c.top_k;
  const DType at = h.dtype();
  const Device dev = h.device();
  const std::size_t esz = dtype_size(at);
  const MoeRouting& r = saved.routing;
  const std::int64_t rows_all = N * k, kept = r.kept();

  // --- the gates: dgate = <dy_t, o_slot>, and the experts' output gradient dO = gate·dy_t ---
  std::vector<double> dgate(static_cast<std::size_t>(rows_all), 0.0);
  Allocation dout = alloc.allocate(static_cast<std::size_t>(rows_all * d) * esz, AllocationTag::workspace);
  kernels::dispatch_float(at, [&](auto tag) {
    using T = decltype(tag);
    const T* dyp = static_cast<const T*>(dy.data());
    const T* op = static_cast<const T*>(saved.o.data());
    T* dop = static_cast<T*>(dout.data());
    for (std::int64_t a = 0; a < rows_all; ++a) {
      const std::int64_t slot = r.slot[static_cast<std::size_t>(a)], t = a / k;
      if (slot < 0) continue;
      const double gate = r.gate[static_cast<std::size_t>(a)];
      double dot = 0;
      for (std::int64_t i = 0; i < d; ++i) {
        const auto gy = kernels::load(dyp[t * d + i]);
        dot += static_cast<double>(gy) * static_cast<double>(kernels::load(op[slot * d + i]));
        dop[slot * d + i] = kernels::store<T>(static_cast<kernels::acc_t<T>>(gate) * gy);
      }
      dgate[static_cast<std::size_t>(a)] = dot;
    }
  });
  saved.o.reset();

  // --- the experts, each over its rows; an expert without rows still has its gradient written ---
  Allocation dx = alloc.allocate(static_cast<std::size_t>(rows_all * d) * esz, AllocationTag::workspace);
  Allocation x;
  if (ep != nullptr) {
    moe_expert_parallel_backward(c, w, g, ConstTensorView(dout.data(), Shape{kept, d}, at, dev),
                                 TensorView(dx.data(), Shape{kept, d}, at, dev), saved, alloc, s, *ep);
  } else {
    const DType gt = g.w_gate.dtype();
    if (!g.accumulate)
      for (const TensorView& t : {g.w_gate, g.w_up, g.w_down})
        std::memset(t.data(), 0, static_cast<std::size_t>(t.numel()) * dtype_size(gt));
    x = alloc.allocate(static_cast<std::size_t>(rows_all * d) * esz, AllocationTag::workspace);
    gather_kept_rows(x, h, r);
    moe_gemms::backward(w, g, r.offsets, dout, x, saved.g, saved.u, saved.a, dx, alloc, s);
  }
  // Back to token order: dh_t += Σ_j dx_slot(t, j), in choice order.
  kernels::dispatch_float(at, [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::acc_t<T>;
    T* dhp = static_cast<T*>(dh.data());
    const T* dxp = static_cast<const T*>(dx.data());
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t i = 0; i < d; ++i) {
        A sum = kernels::load(dhp[t * d + i]);
        for (std::int64_t j = 0; j < k; ++j)
          if (const std::int64_t slot = r.slot[static_cast<std::size_t>(t * k + j)]; slot >= 0)
            sum += kernels::load(dxp[slot * d + i]);
        dhp[t * d + i] = kernels::store<T>(sum);
      }
  });
  dx.reset();
  x.reset();

  // --- the router: gates g_j = s_j / Σ_chosen s, plus the auxiliary loss on the mean probabilities ---
  std::vector<double> ds(static_cast<std::size_t>(N * E), 0.0);
  for (std::int64_t t = 0; t < N; ++t) {
    double chosen = 0, gd = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      const auto a = static_cast<std::size_t>(t * k + j);
      chosen += r.scores[static_cast<std::size_t>(t * E + r.expert[a])];
      gd += r.gate[a] * dgate[a];
    }
    for (std::int64_t j = 0; j < k; ++j) {
      const auto a = static_cast<std::size_t>(t * k + j);
      ds[static_cast<std::size_t>(t * E + r.expert[a])] += (dgate[a] - gd) / chosen;
    }
  }
  if (c.balance == MoeBalance::aux_loss && saved.aux_weight != 0) {
    for (std::int64_t t = 0; t < N; ++t) {
      const double* sc = r.scores.data() + t * E;
      // dL/dp_e for this token's probabilities p: the loss is α·E·Σ_e f_e·mean_t p_te.
      std::vector<double> dp(static_cast<std::size_t>(E));
      // Over the whole micro-batch's tokens B (batch_tokens), whichever share of them this routing holds.
      const auto B = static_cast<double>(r.batch_tokens);
      for (std::int64_t e = 0; e < E; ++e)
        dp[static_cast<std::size_t>(e)] = saved.aux_weight * c.aux_loss_coef * static_cast<double>(E) *
                                          static_cast<double>(r.load[static_cast<std::size_t>(e)]) /
                                          (B * static_cast<double>(k)) / B;
      double* dst = ds.data() + t * E;
      if (c.router_score == RouterScore::softmax) {
        for (std::int64_t e = 0; e < E; ++e) dst[e] += dp[static_cast<std::size_t>(e)];
      } else {  // p = s / Σ s
        double sum = 0, pdp = 0;
        for (std::int64_t e = 0; e < E; ++e) sum += sc[e];
        for (std::int64_t e = 0; e < E; ++e) pdp += sc[e] / sum * dp[static_cast<std::size_t>(e)];
        for (std::int64_t e = 0; e < E; ++e) dst[e] += (dp[static_cast<std::size_t>(e)] - pdp) / sum;
      }
    }
  }
  Allocation dz = alloc.allocate(static_cast<std::size_t>(N * E) * esz, AllocationTag::workspace);
  const TensorView dlogits(dz.data(), Shape{N, E}, at, dev);
  kernels::dispatch_float(at, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(dz.data());
    for (std::int64_t t = 0; t < N; ++t) {
      const double* sc = r.scores.data() + t * E;
      const double* dst = ds.data() + t * E;
      double sds = 0;
      if (c.router_score == RouterScore::softmax)
        for (std::int64_t e = 0; e < E; ++e) sds += sc[e] * dst[e];
      for (std::int64_t e = 0; e < E; ++e) {
        const double dz_e = c.router_score == RouterScore::sigmoid ? dst[e] * sc[e] * (1 - sc[e]) : sc[e] * (dst[e] - sds);
        out[t * E + e] = kernels::store<T>(static_cast<kernels::acc_t<T>>(dz_e));
      }
    }
  });
  linear_bwd_weight(g.router, dlogits, h, g.accumulate, alloc, s);
  linear_bwd_data(dh, dlogits, w.router, true, alloc, s);
  saved.reset();
}

}  // namespace hzp::workloads
