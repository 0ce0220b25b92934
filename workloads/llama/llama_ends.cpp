// The two end units of the Llama decoder: the token embedding (unit 0) and the head (unit L+1: final
// RMSNorm, LM head, softmax cross-entropy against the targets). With tied embeddings the head reads
// the embedding table from unit 0's block and writes its LM-head gradient into unit 0's gradient,
// which the embedding's own backward then accumulates into (ParamLayout's writer rules). Under tensor
// parallelism both ends are vocabulary-parallel: the embedding looks up every token in its V/tp rows and the
// partial lookups are summed over the group (an all-reduce, or a reduce-scatter to the rank's rows under sequence
// parallelism); its backward writes its rows' gradient from every token's output gradient (gathered under
// sequence parallelism). The head's final norm feeds a column-parallel LM head (its [tokens, V/tp] logits) and
// the cross-entropy takes the row maxima and sums of exponentials over the group (vocab_parallel.hpp); its input
// gradient is summed over the group like a column-parallel input's.
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/embedding.hpp"
#include "hzp/kernels/rmsnorm.hpp"
#include "hzp/kernels/vocab_parallel.hpp"
#include "llama/llama_model.hpp"

namespace hzp::workloads::llama {
namespace {

// Our data never ignores a target; -1 keeps the kernel's "ignore" branch unreachable.
constexpr std::int32_t kNoIgnore = -1;

// Rows [first, first + count) of a [rows, N] statistics buffer, flattened.
TensorView stats_row(const Act& a, std::int64_t first, std::int64_t count) {
  const std::int64_t n = a.view.shape()[1];
  return TensorView(static_cast<std::byte*>(a.view.data()) + static_cast<std::size_t>(first * n) * dtype_size(a.view.dtype()),
                    Shape{count * n}, a.view.dtype(), a.view.device());
}

}  // namespace

void LlamaModel::embedding_forward(const UnitParams& params, LlamaContext& ctx) const {
  const Dims d = dims(ctx);
  const ConstTensorView table = tensor_in_block(layout(), 0, 0, params.block(0));
  if (tp_ == nullptr) {
    ctx.hidden = make_act(ctx.allocator(), Shape{d.tokens, d.hidden}, act_dtype());
    kernels::embedding_fwd(ctx.hidden.view, ctx.input_tokens(), table, ctx.stream());
    return;
  }
  // Every token looked up in this rank's vocabulary rows (zero elsewhere): one rank holds each token's row,
  // so the sum over the group is the lookup.
  Act partial = make_act(ctx.allocator(), Shape{d.tokens, d.hidden}, act_dtype());
  kernels::embedding_fwd_vocab_range(partial.view, ctx.input_tokens(), table, vocab_begin(), ctx.stream());
  ctx.hidden = sum_partial(std::move(partial), ctx);
}

void LlamaModel::embedding_backward(LlamaContext& ctx, const UnitGrads& grads) const {
  HZP_CHECK(static_cast<bool>(ctx.dhidden), "embedding backward: no gradient of its output is held");
  const UnitGrads::Block& g = grads.block(0);
  const TensorView dtable = tensor_in_block(layout(), 0, 0, g.view);
  if (tp_ == nullptr) {
    kernels::embedding_bwd(dtable, ctx.input_tokens(), ctx.dhidden.view, g.accumulate, ctx.stream());
  } else {
    // This rank's vocabulary rows take the gradient of every token that looked them up, so it needs every
    // token's output gradient: gathered under sequence parallelism.
    Act gathered;
    if (sp_) gathered = gather_rows(ctx.dhidden.view, ctx);
    kernels::embedding_bwd_vocab_range(dtable, ctx.input_tokens(), sp_ ? gathered.view : ctx.dhidden.view,
                                       vocab_begin(), g.accumulate, ctx.stream());
  }
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
    s.x = std::move(ctx.hidden);  // this rank's rows under sequence parallelism
  }
  HZP_CHECK(static_cast<bool>(s.x), "head forward: no input (did the last block run?)");
  const ConstTensorView w = config_.tied_embeddings ? tensor_in_block(layout(), 0, 0, params.block(0))
                                                    : tensor_in_block(layout(), hu, 1, params.block(hu));
  // The final norm: on every token, or on the rank's rows and gathered (the LM head is column-parallel).
  s.h = norm_for_column_parallel(hu, 0, params, ctx, s.x, s.rstd);
  s.logits = make_act(alloc, Shape{d.tokens, d.vocab}, act_dtype());  // V/tp columns under tensor parallelism
  linear_fwd(s.logits.view, s.h.view, w, alloc, ctx.stream());
  if (!recomputing) {
    // The loss is computed on the first run only; a recompute in backward rebuilds identical logits.
    if (tp_ != nullptr) {
      set_loss_sum(ctx, vocab_parallel_loss(ctx));
    } else {
      Act losses = make_act(alloc, Shape{d.tokens}, stat_dtype());
      const kernels::CrossEntropyResult r = kernels::cross_entropy_fwd(
          losses.view, s.logits.view, ctx.target_tokens(), kNoIgnore, ctx.stream());
      set_loss_sum(ctx, r.loss_sum);
    }
  }
  if (!keep) {
    s.h.reset();
    s.rstd.reset();
    s.logits.reset();
  }
}

double LlamaModel::vocab_parallel_loss(LlamaContext& ctx) const {
  const Dims d = dims(ctx);
  HeadActs& s = ctx.head;
  const StreamRef stream = ctx.stream();
  // [3, N]: row maxima, sums of exponentials, target logits. The last two are sums over the group, adjacent so
  // that one all-reduce takes both.
  s.softmax_stats = make_act(ctx.allocator(), Shape{3, d.tokens}, stat_dtype());
  const TensorView row_max = stats_row(s.softmax_stats, 0, 1), sum_exp = stats_row(s.softmax_stats, 1, 1),
                   target = stats_row(s.softmax_stats, 2, 1);
  kernels::vocab_parallel_ce_local_stats(row_max, target, s.logits.view, ctx.target_tokens(), vocab_begin(), kNoIgnore,
                                         stream);
  tp_all_reduce(row_max, ctx, coll::ReduceOp::max);
  kernels::vocab_parallel_ce_sum_exp(sum_exp, s.logits.view, row_max, stream);
  tp_all_reduce(stats_row(s.softmax_stats, 1, 2), ctx);
  Act losses = make_act(ctx.allocator(), Shape{d.tokens}, stat_dtype());
  return kernels::vocab_parallel_ce_loss(losses.view, row_max, sum_exp, target, ctx.target_tokens(), kNoIgnore, stream)
      .loss_sum;
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

  // dlogits overwrite the logits in place (the kernels read each row before writing it).
  kernels::CrossEntropyGrad cg;
  cg.ignore_index = kNoIgnore;
  cg.normaliser = ctx.normaliser();
  cg.dloss = 1.0;
  if (tp_ != nullptr) {
    kernels::vocab_parallel_ce_bwd(s.logits.view, s.logits.view, ctx.target_tokens(), vocab_begin(),
                                   stats_row(s.softmax_stats, 0, 1), stats_row(s.softmax_stats, 1, 1), cg, ctx.stream());
  } else {
    kernels::cross_entropy_bwd(s.logits.view, s.logits.view, ctx.target_tokens(), cg, ctx.stream());
  }

  const UnitGrads::Block& gh = grads.block(hu);
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
  // Column-parallel over the vocabulary: each rank's dh is its columns' share.
  dh = sum_partial(std::move(dh), ctx);

  ctx.dhidden = make_act(alloc, Shape{local_rows(d), d.hidden}, act_dtype());
  norm_backward(hu, 0, params, ctx, ctx.dhidden.view, dh.view, s.x, s.rstd, gh);
  s.reset_all();
}

}  // namespace hzp::workloads::llama
