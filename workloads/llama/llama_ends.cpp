// The two end units of the Llama decoder: the token embedding (unit 0) and the head (unit L+1: final
// RMSNorm, LM head, softmax cross-entropy against the targets). With tied embeddings the head reads
// the embedding table from unit 0's block and writes its LM-head gradient into unit 0's gradient,
// which the embedding's own backward then accumulates into (ParamLayout's writer rules). Under sequence
// parallelism both ends stay whole on every rank: the embedding looks up its rows only and gathers the rows'
// gradients to write the whole table's, the head gathers the rows and computes logits and loss for every token.
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/embedding.hpp"
#include "hzp/kernels/rmsnorm.hpp"
#include "llama/llama_model.hpp"

namespace hzp::workloads::llama {
namespace {

// Our data never ignores a target; -1 keeps the kernel's "ignore" branch unreachable.
constexpr std::int32_t kNoIgnore = -1;

}  // namespace

void LlamaModel::embedding_forward(const UnitParams& params, LlamaContext& ctx) const {
  const Dims d = dims(ctx);
  const ConstTensorView table = tensor_in_block(layout(), 0, 0, params.block(0));
  // Under sequence parallelism only this rank's rows of tokens are looked up.
  const ConstTensorView all = ctx.input_tokens();
  const std::int64_t rows = local_rows(d);
  const ConstTensorView mine(static_cast<const std::int32_t*>(all.data()) + first_row(d), Shape{rows}, DType::i32,
                             all.device());
  ctx.hidden = make_act(ctx.allocator(), Shape{rows, d.hidden}, act_dtype());
  kernels::embedding_fwd(ctx.hidden.view, mine, table, ctx.stream());
}

void LlamaModel::embedding_backward(LlamaContext& ctx, const UnitGrads& grads) const {
  HZP_CHECK(static_cast<bool>(ctx.dhidden), "embedding backward: no gradient of its output is held");
  const UnitGrads::Block& g = grads.block(0);
  Act gathered;  // sequence parallelism: every token's gradient, so every rank writes the whole table's
  if (sp_) gathered = gather_rows(ctx.dhidden.view, ctx);
  kernels::embedding_bwd(tensor_in_block(layout(), 0, 0, g.view), ctx.input_tokens(),
                         sp_ ? gathered.view : ctx.dhidden.view, g.accumulate, ctx.stream());
  ctx.dhidden.reset();
}

void LlamaModel::head_forward(const UnitParams& params, LlamaContext& ctx, bool recomputing) const {
  const Dims d = dims(ctx);
  // Under recompute the first run keeps only x; the run from backward keeps everything it builds.
  const bool keep = recomputing || !ctx.recompute();
  const int hu = head_unit();
  CachingAllocator& alloc = ctx.allocator();
  HeadActs& s = ctx.head;
  if (!recomputing) {
    HZP_CHECK(static_cast<bool>(ctx.hidden), "head forward: no input (did the last block run?)");
    // Sequence parallelism: every rank computes the whole head on every token, so it gathers the rows.
    s.x = sp_ ? gather_rows(ctx.hidden.view, ctx) : std::move(ctx.hidden);
    ctx.hidden.reset();
  }
  HZP_CHECK(static_cast<bool>(s.x), "head forward: no input (did the last block run?)");
  const ConstTensorView norm_w = tensor_in_block(layout(), hu, 0, params.block(hu));
  const ConstTensorView w = config_.tied_embeddings ? tensor_in_block(layout(), 0, 0, params.block(0))
                                                    : tensor_in_block(layout(), hu, 1, params.block(hu));
  s.h = make_act(alloc, Shape{d.tokens, d.hidden}, act_dtype());
  s.rstd = make_act(alloc, Shape{d.tokens}, stat_dtype());
  kernels::rmsnorm_fwd(s.h.view, s.rstd.view, s.x.view, norm_w, static_cast<float>(config_.norm_eps),
                       ctx.stream());
  s.logits = make_act(alloc, Shape{d.tokens, d.vocab}, act_dtype());
  linear_fwd(s.logits.view, s.h.view, w, alloc, ctx.stream());
  if (!recomputing) {
    // The loss is computed on the first run only; a recompute in backward rebuilds identical logits.
    Act losses = make_act(alloc, Shape{d.tokens}, stat_dtype());
    const kernels::CrossEntropyResult r = kernels::cross_entropy_fwd(
        losses.view, s.logits.view, ctx.target_tokens(), kNoIgnore, ctx.stream());
    set_loss_sum(ctx, r.loss_sum);
  }
  if (!keep) {
    s.h.reset();
    s.rstd.reset();
    s.logits.reset();
  }
}

void LlamaModel::head_backward(const UnitParams& params, LlamaContext& ctx, const UnitGrads& grads) const {
  const Dims d = dims(ctx);
  const int hu = head_unit();
  CachingAllocator& alloc = ctx.allocator();
  HeadActs& s = ctx.head;
  if (ctx.recompute()) {
    const profile::ScopedPhase phase(profile::Phase::recompute, layout().unit(hu).name);
    head_forward(params, ctx, true);
  }
  HZP_CHECK(static_cast<bool>(s.logits), "head backward: its forward state is missing");

  // dlogits overwrite the logits in place (the kernel reads each row before writing it).
  kernels::CrossEntropyGrad cg;
  cg.ignore_index = kNoIgnore;
  cg.normaliser = ctx.normaliser();
  cg.dloss = 1.0;
  kernels::cross_entropy_bwd(s.logits.view, s.logits.view, ctx.target_tokens(), cg, ctx.stream());

  const UnitGrads::Block& gh = grads.block(hu);
  const ConstTensorView norm_w = tensor_in_block(layout(), hu, 0, params.block(hu));
  const ConstTensorView w = config_.tied_embeddings ? tensor_in_block(layout(), 0, 0, params.block(0))
                                                    : tensor_in_block(layout(), hu, 1, params.block(hu));
  const UnitGrads::Block& gw = config_.tied_embeddings ? grads.block(0) : gh;
  const TensorView dw = config_.tied_embeddings ? tensor_in_block(layout(), 0, 0, gw.view)
                                                : tensor_in_block(layout(), hu, 1, gw.view);
  linear_bwd_weight(dw, s.logits.view, s.h.view, gw.accumulate, alloc, ctx.stream());
  Act dh = make_act(alloc, Shape{d.tokens, d.hidden}, act_dtype());
  linear_bwd_data(dh.view, s.logits.view, w, false, alloc, ctx.stream());
  s.logits.reset();
  s.h.reset();

  ctx.dhidden = make_act(alloc, Shape{d.tokens, d.hidden}, act_dtype());
  kernels::rmsnorm_bwd(ctx.dhidden.view, tensor_in_block(layout(), hu, 0, gh.view), dh.view, s.x.view, norm_w,
                       s.rstd.view, gh.accumulate, ctx.stream());
  s.reset_all();
  if (sp_) {
    // Every rank computed the same loss once over every token: the gradient of its rows is its slice.
    Act rows = make_act(alloc, Shape{local_rows(d), d.hidden}, act_dtype());
    const std::size_t row_bytes = static_cast<std::size_t>(d.hidden) * dtype_size(act_dtype());
    copy_bytes(rows.view.data(), rows.view.device(),
               static_cast<const std::byte*>(ctx.dhidden.view.data()) + static_cast<std::size_t>(first_row(d)) * row_bytes,
               ctx.dhidden.view.device(), static_cast<std::size_t>(local_rows(d)) * row_bytes, ctx.stream());
    ctx.dhidden = std::move(rows);
  }
}

}  // namespace hzp::workloads::llama
