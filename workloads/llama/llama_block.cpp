// One Llama transformer block, forward and backward:
//   h1 = RMSNorm(x)·g1;  q,k,v = h1·Wqᵀ, h1·Wkᵀ, h1·Wvᵀ;  q,k = RoPE(q), RoPE(k)
//   x2 = x + Attention(q, k, v)·Woᵀ        (causal, grouped-query, scale 1/sqrt(head_dim))
//   h2 = RMSNorm(x2)·g2;  y = x2 + (silu(h2·Wgᵀ) ⊙ h2·Wuᵀ)·Wdᵀ
// Under context parallelism the rank's tokens are its ContextShard of every sequence: RoPE at their global
// positions, and attention is ring attention over the cp group (the only place the group meets).
// Under tensor parallelism each rank runs its heads and its share of the MLP width, and the four sums over
// the group (row-parallel outputs in forward, column-parallel inputs' gradients in backward) make the
// residual stream and its gradient whole again on every rank; under sequence parallelism the residual
// stream, the norms and the adds run on the rank's rows, the sums become reduce-scatters to those rows, and
// the matmuls' inputs (and the output gradients they read) are all-gathered from them. An MoE block's routed
// experts run on the rank's 1/tp of the token rows and add into its rows of the MLP's partial (moe_block.cpp), so
// the same sums complete them.
// Every tensor between kernels is in the activation dtype (bf16 in bf16-mixed: each kernel accumulates
// in fp32 and rounds once on store); parameter gradients go straight into the fp32 gradient blocks.
#include <cstddef>
#include <cstring>
#include <span>

#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/add.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/rmsnorm.hpp"
#include "hzp/kernels/rope.hpp"
#include "hzp/kernels/swiglu.hpp"
#include "hzp/workloads/ring_attention.hpp"
#include "llama/llama_model.hpp"

namespace hzp::workloads::llama {
namespace {

// Tensor order inside a block (llama_layout). An MoE block has the same first six; the SwiGLU's three only with
// shared experts; then its four routed tensors (moe_block.cpp).
enum BlockTensor : int { kAttnNorm, kWq, kWk, kWv, kWo, kMlpNorm, kWgate, kWup, kWdown, kNumBlockTensors };

kernels::AttentionDims attention_dims(const Dims& d) {
  return {d.batch, d.seq, d.heads, d.kv_heads, d.head_dim};
}

std::span<std::byte> bytes_of(Allocation& a, std::size_t n) {
  return {static_cast<std::byte*>(a.data()), a ? n : 0};
}

}  // namespace

void LlamaModel::block_compute(int unit, const UnitParams& params, LlamaContext& ctx, BlockActs& s, Act* out) const {
  const Dims d = dims(ctx);
  CachingAllocator& alloc = ctx.allocator();
  const DType at = act_dtype(), st = stat_dtype();
  const ConstTensorView block = params.block(unit);
  auto w = [&](int t) { return tensor_in_block(layout(), unit, t, block); };
  const StreamRef stream = ctx.stream();
  HZP_CHECK(static_cast<bool>(s.x), "block ", unit - 1, ": no input held");

  // --- attention ---
  s.h1 = norm_for_column_parallel(unit, kAttnNorm, params, ctx, s.x, s.rstd1);
  s.q = make_act(alloc, Shape{d.tokens, d.heads * d.head_dim}, at);
  s.k = make_act(alloc, Shape{d.tokens, d.kv_heads * d.head_dim}, at);
  s.v = make_act(alloc, Shape{d.tokens, d.kv_heads * d.head_dim}, at);
  linear_fwd(s.q.view, s.h1.view, w(kWq), alloc, stream);
  linear_fwd(s.k.view, s.h1.view, w(kWk), alloc, stream);
  linear_fwd(s.v.view, s.h1.view, w(kWv), alloc, stream);
  rope(ctx, reshape(s.q.view, Shape{d.tokens, d.heads, d.head_dim}), /*backward=*/false);
  rope(ctx, reshape(s.k.view, Shape{d.tokens, d.kv_heads, d.head_dim}), /*backward=*/false);
  s.att = make_act(alloc, Shape{d.tokens, d.heads * d.head_dim}, at);
  s.lse = make_act(alloc, Shape{d.batch, d.heads, d.seq}, st);
  attention_forward(ctx, s);
  {
    Act partial = make_act(alloc, Shape{d.tokens, d.hidden}, at);
    linear_fwd(partial.view, s.att.view, w(kWo), alloc, stream);
    s.x2 = sum_partial(std::move(partial), ctx);  // row-parallel: each rank holds its heads' share
  }
  kernels::add(s.x2.view, s.x.view, s.x2.view, stream);

  // --- MLP (an MoE block: its shared experts as one SwiGLU, if any, plus the routed experts) ---
  const std::int64_t ffn = block_ffn(unit);
  const bool moe = config_.moe.is_moe_layer(unit - 1);
  s.h2 = norm_for_column_parallel(unit, kMlpNorm, params, ctx, s.x2, s.rstd2);
  if (ffn > 0) {
    s.g = make_act(alloc, Shape{d.tokens, ffn}, at);
    s.u = make_act(alloc, Shape{d.tokens, ffn}, at);
    linear_fwd(s.g.view, s.h2.view, w(kWgate), alloc, stream);
    linear_fwd(s.u.view, s.h2.view, w(kWup), alloc, stream);
    s.a = make_act(alloc, Shape{d.tokens, ffn}, at);
    kernels::swiglu_fwd(s.a.view, s.g.view, s.u.view, stream);
  }

  if (out == nullptr) {  // a recompute needs the saved tensors only, not y
    if (moe) moe_forward(unit, params, ctx, s, TensorView());
    return;
  }
  Act partial = make_act(alloc, Shape{d.tokens, d.hidden}, at);
  if (ffn > 0)
    linear_fwd(partial.view, s.a.view, w(kWdown), alloc, stream);
  else  // the MoE block's routed experts add into it (host only)
    std::memset(partial.view.data(), 0, static_cast<std::size_t>(partial.view.numel()) * dtype_size(at));
  // Under tensor parallelism the routed experts add their output on this rank's rows only (moe_rows): the sum
  // over the group that completes the shared experts' row-parallel output completes theirs too.
  if (moe) moe_forward(unit, params, ctx, s, partial.view);
  *out = sum_partial(std::move(partial), ctx);
  kernels::add(out->view, s.x2.view, out->view, stream);
}

void LlamaModel::block_backward(int unit, const UnitParams& params, LlamaContext& ctx, const UnitGrads& grads) const {
  const Dims d = dims(ctx);
  CachingAllocator& alloc = ctx.allocator();
  const DType at = act_dtype();
  BlockActs& s = ctx.blocks[static_cast<std::size_t>(unit - 1)];
  const StreamRef stream = ctx.stream();
  if (ctx.recompute()) {
    const profile::ScopedPhase phase(profile::Phase::recompute, layout().unit(unit).name);
    block_compute(unit, params, ctx, s, nullptr);
  }
  HZP_CHECK(static_cast<bool>(s.h2) && static_cast<bool>(ctx.dhidden), "block ", unit - 1,
            " backward: its forward state or its output gradient is missing");

  const ConstTensorView block = params.block(unit);
  auto w = [&](int t) { return tensor_in_block(layout(), unit, t, block); };
  const UnitGrads::Block& gb = grads.block(unit);
  auto dw = [&](int t) { return tensor_in_block(layout(), unit, t, gb.view); };
  const bool acc = gb.accumulate;
  Act dy = std::move(ctx.dhidden);  // this rank's rows under sequence parallelism
  // The row-parallel matmuls read the gradient of every token: gathered under sequence parallelism.
  auto all_tokens = [&](const Act& rows, Act& gathered) -> ConstTensorView {
    if (!sp_) return rows.view;
    gathered = gather_rows(rows.view, ctx);
    return gathered.view;
  };

  // --- MLP: y = x2 + a·Wdᵀ (+ the routed experts' output in an MoE block) ---
  const std::int64_t ffn = block_ffn(unit);
  const bool moe = config_.moe.is_moe_layer(unit - 1);
  Act dh2;
  if (ffn > 0) {
    Act dy_all;
    const ConstTensorView dyv = all_tokens(dy, dy_all);
    linear_bwd_weight(dw(kWdown), dyv, s.a.view, acc, alloc, stream);
    Act da = make_act(alloc, Shape{d.tokens, ffn}, at);
    linear_bwd_data(da.view, dyv, w(kWdown), false, alloc, stream);
    dy_all.reset();
    s.a.reset();
    // dgate and dup overwrite gate and up (the kernel reads each element before writing it).
    kernels::swiglu_bwd(s.g.view, s.u.view, da.view, s.g.view, s.u.view, stream);
    da.reset();
    const TensorView dg = s.g.view, du = s.u.view;
    linear_bwd_weight(dw(kWgate), dg, s.h2.view, acc, alloc, stream);
    linear_bwd_weight(dw(kWup), du, s.h2.view, acc, alloc, stream);
    dh2 = make_act(alloc, Shape{d.tokens, d.hidden}, at);
    linear_bwd_data(dh2.view, dg, w(kWgate), false, alloc, stream);
    linear_bwd_data(dh2.view, du, w(kWup), true, alloc, stream);
    if (!moe) dh2 = sum_partial(std::move(dh2), ctx);  // h2 fed every rank's column-parallel piece: the sum of theirs
    s.g.reset();
    s.u.reset();
  } else {
    dh2 = make_act(alloc, Shape{d.tokens, d.hidden}, at);
    std::memset(dh2.view.data(), 0, static_cast<std::size_t>(dh2.view.numel()) * dtype_size(at));
  }
  if (moe) {
    // The routed experts add their rows' share (moe_rows) before the sum over the group (a no-op without tp).
    moe_backward(unit, params, ctx, s, grads, dy.view, dh2.view);
    dh2 = sum_partial(std::move(dh2), ctx);
  }
  s.h2.reset();
  Act dx2 = make_act(alloc, Shape{local_rows(d), d.hidden}, at);
  norm_backward(unit, kMlpNorm, params, ctx, dx2.view, dh2.view, s.x2, s.rstd2, gb);
  dh2.reset();
  s.rstd2.reset();
  s.x2.reset();
  kernels::add(dx2.view, dx2.view, dy.view, stream);  // the residual path
  dy.reset();

  // --- attention: x2 = x + att·Woᵀ ---
  Act dx2_all;
  const ConstTensorView dx2v = all_tokens(dx2, dx2_all);
  linear_bwd_weight(dw(kWo), dx2v, s.att.view, acc, alloc, stream);
  Act datt = make_act(alloc, Shape{d.tokens, d.heads * d.head_dim}, at);
  linear_bwd_data(datt.view, dx2v, w(kWo), false, alloc, stream);
  dx2_all.reset();
  Act dq = make_act(alloc, Shape{d.tokens, d.heads * d.head_dim}, at);
  Act dk = make_act(alloc, Shape{d.tokens, d.kv_heads * d.head_dim}, at);
  Act dv = make_act(alloc, Shape{d.tokens, d.kv_heads * d.head_dim}, at);
  attention_backward(ctx, s, dq.view, dk.view, dv.view, datt.view);
  datt.reset();
  s.att.reset();
  s.lse.reset();
  s.q.reset();
  s.k.reset();
  s.v.reset();
  rope(ctx, reshape(dq.view, Shape{d.tokens, d.heads, d.head_dim}), /*backward=*/true);
  rope(ctx, reshape(dk.view, Shape{d.tokens, d.kv_heads, d.head_dim}), /*backward=*/true);
  linear_bwd_weight(dw(kWq), dq.view, s.h1.view, acc, alloc, stream);
  linear_bwd_weight(dw(kWk), dk.view, s.h1.view, acc, alloc, stream);
  linear_bwd_weight(dw(kWv), dv.view, s.h1.view, acc, alloc, stream);
  Act dh1 = make_act(alloc, Shape{d.tokens, d.hidden}, at);
  linear_bwd_data(dh1.view, dq.view, w(kWq), false, alloc, stream);
  linear_bwd_data(dh1.view, dk.view, w(kWk), true, alloc, stream);
  linear_bwd_data(dh1.view, dv.view, w(kWv), true, alloc, stream);
  dh1 = sum_partial(std::move(dh1), ctx);
  dq.reset();
  dk.reset();
  dv.reset();
  s.h1.reset();
  Act dx = make_act(alloc, Shape{local_rows(d), d.hidden}, at);
  norm_backward(unit, kAttnNorm, params, ctx, dx.view, dh1.view, s.x, s.rstd1, gb);
  dh1.reset();
  kernels::add(dx.view, dx.view, dx2.view, stream);
  s.reset_all();
  ctx.dhidden = std::move(dx);
  static_assert(kNumBlockTensors == 9, "llama_layout lists nine tensors per dense block");
}

void LlamaModel::rope(LlamaContext& ctx, TensorView x, bool backward) const {
  // In place: both kernels allow it. Packed documents restart their positions (position − document start), as
  // packed-data pipelines reset position ids, so each document is rotated as if it ran alone.
  const bool packed = !ctx.document_first().empty();
  if (cp_ == nullptr && !packed) {
    (backward ? kernels::rope_bwd : kernels::rope_fwd)(x, x, ctx.seq_len(), config_.rope_base, ctx.stream());
    return;
  }
  (backward ? kernels::rope_bwd_at : kernels::rope_fwd_at)(x, x, packed ? ctx.document_positions() : ctx.positions(),
                                                           config_.rope_base, ctx.stream());
}

RingAttention LlamaModel::ring_attention(LlamaContext& ctx) const {
  const Dims d = dims(ctx);
  return RingAttention(*cp_, *context_shard(), {d.batch, d.heads, d.kv_heads, d.head_dim}, act_dtype(), ctx.allocator(),
                       ctx.ring_lane(), ctx.requests());
}

void LlamaModel::attention_forward(LlamaContext& ctx, BlockActs& s) const {
  const Dims d = dims(ctx);
  CachingAllocator& alloc = ctx.allocator();
  if (cp_ != nullptr) {
    ring_attention(ctx).forward(s.att.view, s.lse.view, s.q.view, s.k.view, s.v.view, ctx.stream(),
                                ctx.document_first(), ctx.stream_document_first());
    return;
  }
  const kernels::AttentionDims ad = attention_dims(d);
  const std::span<const std::int32_t> first = ctx.stream_document_first();
  const std::size_t n =
      kernels::attention_fwd_workspace_bytes(ad, act_dtype(), alloc.device(), config_.attention, !first.empty());
  Allocation ws = alloc.allocate(n, AllocationTag::workspace);
  kernels::attention_fwd(s.att.view, s.lse.view, s.q.view, s.k.view, s.v.view, ad, bytes_of(ws, n), ctx.stream(),
                         config_.attention, first);
}

void LlamaModel::attention_backward(LlamaContext& ctx, BlockActs& s, TensorView dq, TensorView dk, TensorView dv,
                                    ConstTensorView datt) const {
  const Dims d = dims(ctx);
  CachingAllocator& alloc = ctx.allocator();
  if (cp_ != nullptr) {
    ring_attention(ctx).backward(dq, dk, dv, datt, s.q.view, s.k.view, s.v.view, s.att.view, s.lse.view, ctx.stream(),
                                 ctx.document_first(), ctx.stream_document_first());
    return;
  }
  const kernels::AttentionDims ad = attention_dims(d);
  const std::span<const std::int32_t> first = ctx.stream_document_first();
  const std::size_t n =
      kernels::attention_bwd_workspace_bytes(ad, act_dtype(), alloc.device(), config_.attention, !first.empty());
  Allocation ws = alloc.allocate(n, AllocationTag::workspace);
  kernels::attention_bwd(dq, dk, dv, datt, s.q.view, s.k.view, s.v.view, s.att.view, s.lse.view, ad, bytes_of(ws, n),
                         ctx.stream(), config_.attention, first);
}

}  // namespace hzp::workloads::llama
