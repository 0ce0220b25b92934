// The routed experts' GEMMs over expert-sorted rows (private to hzp_workloads): expert e's rows are
// [begin[e], begin[e + 1]) of every row buffer, and each expert is three GEMMs over its rows with the dense MLP's
// linear layers and SwiGLU kernel. One rank's layer (moe_experts.cpp: every expert, rows in slot order) and an
// expert-parallel rank (moe_expert_parallel.cpp: its E/ep experts, the rows the group sent it) run the same code.
#pragma once

#include <cstdint>
#include <span>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/workloads/moe.hpp"

namespace hzp::workloads::moe_gemms {

/// Forward over rows x [rows, d]: g, u [rows, F] (the gate and up projections), a = SwiGLU(g, u) and o = a·W_downᵀ
/// [rows, d]; `w`'s expert e runs rows [begin[e], begin[e + 1]).
void forward(const MoeExpertWeights& w, std::span<const std::int64_t> begin, Allocation& x, Allocation& g,
             Allocation& u, Allocation& a, Allocation& o, CachingAllocator& alloc, StreamRef s);

/// Backward from the outputs' gradients dout [rows, d]: accumulates every expert's weight gradients into `grads`
/// (the caller zeroes them for an overwrite) and writes the inputs' gradients dx [rows, d]. Overwrites g and u with
/// their gradients and frees a.
void backward(const MoeExpertWeights& w, const MoeExpertGrads& grads, std::span<const std::int64_t> begin,
              Allocation& dout, Allocation& x, Allocation& g, Allocation& u, Allocation& a, Allocation& dx,
              CachingAllocator& alloc, StreamRef s);

}  // namespace hzp::workloads::moe_gemms
