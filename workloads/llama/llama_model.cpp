// LlamaModel: construction, the context, and the dispatch from a unit index to the embedding, a
// transformer block or the head (llama_model.hpp). The factory make_llama (llama.hpp) lives here.
#include "llama/llama_model.hpp"

#include <utility>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/kernels/add.hpp"
#include "hzp/kernels/rmsnorm.hpp"

namespace hzp::workloads::llama {

void BlockActs::reset_internals() noexcept {
  for (Act* a : {&h1, &rstd1, &q, &k, &v, &att, &lse, &x2, &h2, &rstd2, &g, &u, &this->a}) a->reset();
  moe.reset();
}

void BlockActs::reset_all() noexcept {
  reset_internals();
  x.reset();
}

void HeadActs::reset_all() noexcept {
  for (Act* a : {&x, &h, &rstd, &logits, &softmax_stats}) a->reset();
}

LlamaContext::LlamaContext(CachingAllocator& alloc, const ContextOptions& options, const LlamaConfig& config,
                           int num_units, DType act_dtype, std::int64_t seq_len, std::int64_t rows,
                           std::vector<std::int32_t> positions)
    : MicroBatchContext(alloc, options, seq_len, num_units),
      blocks(static_cast<std::size_t>(config.layers)),
      hidden_width_(config.hidden),
      act_dtype_(act_dtype),
      rows_(rows),
      positions_(std::move(positions)) {
  // Stream-ordered, as begin()'s token copy: RoPE's kernels on the stream read the positions after it. positions_
  // (the copy's source) lives as long as the context.
  if (stream().device().is_cuda() && !positions_.empty()) {
    const std::size_t bytes = positions_.size() * sizeof(std::int32_t);
    device_positions_ = alloc.allocate(bytes, AllocationTag::activation);
    copy_bytes(device_positions_.data(), stream().device(), positions_.data(), Device::cpu(), bytes, stream());
    if (options.ring_lane == nullptr) own_ring_lane_ = std::make_unique<RingExchangeLane>(stream().device());
    ring_lane_ = options.ring_lane ? options.ring_lane : own_ring_lane_.get();
    HZP_CHECK(ring_lane_->stream.device() == stream().device(), "a context on ", to_string(stream().device()),
              " was given a ring exchange lane on ", to_string(ring_lane_->stream.device()),
              "; give it a lane of the compute stream's device");
  }
}

// Between units the residual stream travels in `hidden` (forward) and its gradient in `dhidden` (backward):
// a stage's boundary is exactly those two.
TensorView LlamaContext::allocate_boundary(bool gradient) {
  Act& a = gradient ? dhidden : hidden;
  a = make_act(allocator(), boundary_shape(), act_dtype_);
  return a.view;
}

ConstTensorView LlamaContext::boundary(bool gradient) const {
  const Act& a = gradient ? dhidden : hidden;
  HZP_CHECK(static_cast<bool>(a), "no ", gradient ? "input gradient" : "output", " is held");
  return a.view;
}

void LlamaContext::drop_boundary(bool gradient) { (gradient ? dhidden : hidden).reset(); }

ConstTensorView LlamaContext::logits() const {
  HZP_CHECK(static_cast<bool>(head.logits), "logits are held from the head's forward until its backward, and "
            "not at all under recompute (train.recompute = true drops them after the loss)");
  return head.logits.view;
}

ConstTensorView LlamaContext::document_positions() {
  const std::span<const std::int32_t> first = document_first();
  const Shape shape{static_cast<std::int64_t>(first.size())};
  if (document_positions_.empty() && !first.empty()) {
    document_positions_.resize(first.size());
    // The first use of a micro-batch's documents (RoPE comes before attention in every block), so the mask is
    // checked here once, on the host: the CPU kernels check it again, a GPU's cannot read it.
    for (std::size_t i = 0; i < first.size(); ++i) {
      const std::int64_t at = positions_.empty() ? static_cast<std::int64_t>(i) % seq_len() : positions_[i];
      const std::int64_t prev = i % static_cast<std::size_t>(seq_len()) == 0 ? 0 : first[i - 1];
      HZP_CHECK(first[i] >= prev && first[i] <= at, "document_first[", i, "] = ", first[i], " (token position ", at,
                ") must lie in [", prev, ", ", at, "]: a token's document starts at or before it, no earlier than "
                "the previous token's");
      document_positions_[i] = static_cast<std::int32_t>(at - first[i]);
    }
    if (stream().device().is_cuda()) {
      const std::size_t bytes = first.size() * sizeof(std::int32_t);
      if (!device_document_positions_)
        device_document_positions_ = allocator().allocate(bytes, AllocationTag::activation);
      copy_bytes(device_document_positions_.data(), stream().device(), document_positions_.data(), Device::cpu(),
                 bytes, stream());
    }
  }
  if (stream().device().is_cuda())
    return ConstTensorView(device_document_positions_.data(), shape, DType::i32, stream().device());
  return ConstTensorView(document_positions_.data(), shape, DType::i32);
}

void LlamaContext::release_all() {
  document_positions_.clear();
  for (BlockActs& b : blocks) b.reset_all();
  head.reset_all();
  hidden.reset();
  dhidden.reset();
}

namespace {
ParamLayout layout_of(const LlamaConfig& config, const TensorParallel& tp, const StageCut& stage,
                      const ExpertParallel& ep) {
  const int tp_size = tp.group ? tp.group->size() : 1, ep_size = ep.group ? ep.group->size() : 1;
  check_expert_parallel(config, ep_size, tp_size);
  const int tp_rank = tp.group ? tp.group->rank() : 0;
  ParamLayout whole = ep_size > 1 ? llama_expert_parallel_layout(config, ep_size, ep.group->rank(), tp_size, tp_rank)
                                  : llama_layout(config, tp_size, tp_rank);
  return stage.empty() ? whole : stage_layout(whole, stage);
}
}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config, Precision precision, const TensorParallel& tp,
                       const StageCut& stage, const ContextParallel& cp, const ExpertParallel& ep)
    : Workload(layout_of(config, tp, stage, ep), precision, config.seq_len, config.vocab),
      config_(config),
      balance_(config.moe, config.moe.enabled() ? config.layers - config.moe.dense_layers : 0),
      cp_(cp.group && cp.group->size() > 1 ? cp.group : nullptr),
      tp_(tp.group && tp.group->size() > 1 ? tp.group : nullptr),
      ep_(ep.group && ep.group->size() > 1 ? ep.group : nullptr),
      tp_size_(tp_ ? tp_->size() : 1),
      tp_rank_(tp_ ? tp_->rank() : 0),
      sp_(tp_ != nullptr && tp.sequence_parallel) {
  if (cp_) check_moe_token_split(config.moe, "scheduler.cp", cp_->size());
  if (cp_) set_context_shard(ContextShard(config.seq_len, cp_->size(), cp_->rank()));  // ConfigError: T vs 2·cp
}

namespace {

// A tp collective's request: to the context's keeper, or waited for here without one (a context made outside a
// step driver). Either way the host stream waits at once, as the blocking call did.
void settle(coll::Request r, const LlamaContext& ctx) {
  if (coll::StreamOrderedRequests* keeper = ctx.requests())
    keeper->settle(std::move(r));
  else
    r.wait();
}

}  // namespace

void LlamaModel::tp_all_reduce(TensorView v, LlamaContext& ctx, coll::ReduceOp op) const {
  if (tp_ == nullptr) return;
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "tp all_reduce");
  settle(tp_->start_all_reduce(v, op, ctx.stream()), ctx);
}

void LlamaModel::tp_all_gather(ConstTensorView rows, TensorView full, LlamaContext& ctx) const {
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "tp all_gather");
  settle(tp_->start_all_gather(rows, full, ctx.stream()), ctx);
}

void LlamaModel::tp_reduce_scatter(ConstTensorView full, TensorView rows, LlamaContext& ctx) const {
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "tp reduce_scatter");
  settle(tp_->start_reduce_scatter(full, rows, coll::ReduceOp::sum, ctx.stream()), ctx);
}

Act LlamaModel::norm_for_column_parallel(int unit, int t, const UnitParams& params, LlamaContext& ctx, const Act& x,
                                         Act& rstd) const {
  const Dims d = dims(ctx);
  CachingAllocator& alloc = ctx.allocator();
  const std::int64_t rows = local_rows(d);
  rstd = make_act(alloc, Shape{rows}, stat_dtype());
  Act h = make_act(alloc, Shape{rows, d.hidden}, act_dtype());
  kernels::rmsnorm_fwd(h.view, rstd.view, x.view, tensor_in_block(layout(), unit, t, params.block(unit)),
                       static_cast<float>(config_.norm_eps), ctx.stream());
  return sp_ ? gather_rows(h.view, ctx) : std::move(h);
}

Act LlamaModel::gather_rows(ConstTensorView rows, LlamaContext& ctx) const {
  const Dims d = dims(ctx);
  Act full = make_act(ctx.allocator(), Shape{d.tokens, d.hidden}, act_dtype());
  tp_all_gather(rows, full.view, ctx);
  return full;
}

void LlamaModel::norm_backward(int unit, int t, const UnitParams& params, LlamaContext& ctx, TensorView dx,
                               ConstTensorView dh, const Act& x, const Act& rstd, const UnitGrads::Block& grad) const {
  const ConstTensorView w = tensor_in_block(layout(), unit, t, params.block(unit));
  const TensorView dw = tensor_in_block(layout(), unit, t, grad.view);
  if (!sp_) {
    kernels::rmsnorm_bwd(dx, dw, dh, x.view, w, rstd.view, grad.accumulate, ctx.stream());
    return;
  }
  // This rank's rows' share of the weight gradient, summed over the group before it is written.
  Act part = make_act(ctx.allocator(), dw.shape(), dw.dtype(), AllocationTag::workspace);
  kernels::rmsnorm_bwd(dx, part.view, dh, x.view, w, rstd.view, false, ctx.stream());
  tp_all_reduce(part.view, ctx);
  if (grad.accumulate)
    kernels::add(dw, dw, part.view, ctx.stream());
  else
    copy_bytes(dw.data(), dw.device(), part.view.data(), part.view.device(),
               static_cast<std::size_t>(dw.numel()) * dtype_size(dw.dtype()), ctx.stream());
}

Act LlamaModel::sum_partial(Act partial, LlamaContext& ctx) const {
  if (!sp_) {
    tp_all_reduce(partial.view, ctx);
    return partial;
  }
  const Dims d = dims(ctx);
  Act rows = make_act(ctx.allocator(), Shape{local_rows(d), d.hidden}, act_dtype());
  tp_reduce_scatter(partial.view, rows.view, ctx);
  return rows;
}

std::unique_ptr<MicroBatchContext> LlamaModel::new_context(CachingAllocator& allocator,
                                                           const ContextOptions& options) const {
  const std::int64_t seq = local_seq_len(), tokens = options.micro_batch_size * seq;
  if (sp_ && tokens % tp_size_ != 0)
    HZP_THROW(ConfigError, "sequence parallelism splits a micro-batch's train.micro_batch_size x ",
              cp_ ? "(model.seq_len / scheduler.cp)" : "model.seq_len", " = ", options.micro_batch_size, " x ", seq,
              " = ", tokens, " tokens over tp = ", tp_size_, " ranks, which does not divide them; fix: a micro-batch "
              "size or sequence length whose product tp divides");
  if (config_.moe.enabled() && tp_ && tokens % tp_size_ != 0)
    HZP_THROW(ConfigError, "tensor parallelism splits an MoE block's token rows over tp = ", tp_size_, " ranks for "
              "its routed experts, but a micro-batch holds train.micro_batch_size x ",
              cp_ ? "(model.seq_len / scheduler.cp)" : "model.seq_len", " = ", options.micro_batch_size, " x ", seq,
              " = ", tokens, " tokens, which tp does not divide; fix: a micro-batch size or sequence length whose "
              "product tp divides");
  if (config_.moe.enabled() && allocator.device().is_cuda())
    HZP_THROW(ConfigError, "the MoE model (model.experts = ", config_.moe.experts, ") runs on backend = cpu only for "
              "now: its router and expert dispatch have no CUDA kernels yet. Fix: backend = cpu, or model.experts = 0");
  std::vector<std::int32_t> positions;
  if (cp_) positions = context_shard()->positions(options.micro_batch_size);
  return std::make_unique<LlamaContext>(allocator, options, config_, layout().num_units(), act_dtype(), seq,
                                        sp_ ? tokens / tp_size_ : tokens, std::move(positions));
}

Dims LlamaModel::dims(const MicroBatchContext& ctx) const {
  return Dims{ctx.micro_batch_size(),
              ctx.seq_len(),
              ctx.tokens(),
              config_.hidden,
              config_.heads / tp_size_,  // this rank's heads and MLP width under tensor parallelism
              config_.kv_heads / tp_size_,
              config_.resolved_head_dim(),
              config_.ffn_hidden / tp_size_,
              config_.vocab / tp_size_};  // the rank's vocabulary rows (vocabulary-parallel ends)
}

void LlamaModel::forward_unit(int unit, const UnitParams& params, MicroBatchContext& base) const {
  auto& ctx = static_cast<LlamaContext&>(base);
  if (unit == 0) {
    embedding_forward(params, ctx);
  } else if (unit == head_unit()) {
    head_forward(params, ctx, /*recomputing=*/false);
  } else {
    BlockActs& s = ctx.blocks[static_cast<std::size_t>(unit - 1)];
    s.x = std::move(ctx.hidden);
    Act out;
    block_compute(unit, params, ctx, s, &out);
    if (ctx.recompute()) s.reset_internals();
    ctx.hidden = std::move(out);
  }
}

void LlamaModel::backward_unit(int unit, const UnitParams& params, MicroBatchContext& base,
                               const UnitGrads& grads) const {
  auto& ctx = static_cast<LlamaContext&>(base);
  if (unit == 0) {
    embedding_backward(ctx, grads);
  } else if (unit == head_unit()) {
    head_backward(params, ctx, grads);
  } else {
    block_backward(unit, params, ctx, grads);
  }
}

}  // namespace hzp::workloads::llama

namespace hzp::workloads {

std::unique_ptr<Workload> make_llama(const LlamaConfig& config, Precision precision, const TensorParallel& tp,
                                     const StageCut& stage, const ContextParallel& cp, const ExpertParallel& ep) {
  return std::make_unique<llama::LlamaModel>(config, precision, tp, stage, cp, ep);
}

}  // namespace hzp::workloads
