// LlamaModel: construction, the context, and the dispatch from a unit index to the embedding, a
// transformer block or the head (llama_model.hpp). The factory make_llama (llama.hpp) lives here.
#include "llama/llama_model.hpp"

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"

namespace hzp::workloads::llama {

void BlockActs::reset_internals() noexcept {
  for (Act* a : {&h1, &rstd1, &q, &k, &v, &att, &lse, &x2, &h2, &rstd2, &g, &u, &this->a}) a->reset();
}

void BlockActs::reset_all() noexcept {
  reset_internals();
  x.reset();
}

void HeadActs::reset_all() noexcept {
  for (Act* a : {&x, &h, &rstd, &logits}) a->reset();
}

LlamaContext::LlamaContext(CachingAllocator& alloc, const ContextOptions& options, const LlamaConfig& config,
                           int num_units, DType act_dtype)
    : MicroBatchContext(alloc, options, config.seq_len, num_units),
      blocks(static_cast<std::size_t>(config.layers)),
      hidden_width_(config.hidden),
      act_dtype_(act_dtype) {}

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

void LlamaContext::release_all() {
  for (BlockActs& b : blocks) b.reset_all();
  head.reset_all();
  hidden.reset();
  dhidden.reset();
}

LlamaModel::LlamaModel(const LlamaConfig& config, Precision precision, coll::Communicator* tensor_parallel)
    : Workload(llama_layout(config, tensor_parallel ? tensor_parallel->size() : 1,
                            tensor_parallel ? tensor_parallel->rank() : 0),
               precision, config.seq_len, config.vocab),
      config_(config),
      tp_(tensor_parallel && tensor_parallel->size() > 1 ? tensor_parallel : nullptr),
      tp_size_(tp_ ? tp_->size() : 1) {}

void LlamaModel::tp_all_reduce(TensorView v, StreamRef stream) const {
  if (tp_ == nullptr) return;
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "tp all_reduce");
  tp_->all_reduce(v, coll::ReduceOp::sum, stream);
}

std::unique_ptr<MicroBatchContext> LlamaModel::new_context(CachingAllocator& allocator,
                                                           const ContextOptions& options) const {
  return std::make_unique<LlamaContext>(allocator, options, config_, layout().num_units(), act_dtype());
}

Dims LlamaModel::dims(const MicroBatchContext& ctx) const {
  return Dims{ctx.micro_batch_size(),
              config_.seq_len,
              ctx.tokens(),
              config_.hidden,
              config_.heads / tp_size_,  // this rank's heads and MLP width under tensor parallelism
              config_.kv_heads / tp_size_,
              config_.resolved_head_dim(),
              config_.ffn_hidden / tp_size_,
              config_.vocab};
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

std::unique_ptr<Workload> make_llama(const LlamaConfig& config, Precision precision,
                                     coll::Communicator* tensor_parallel) {
  return std::make_unique<llama::LlamaModel>(config, precision, tensor_parallel);
}

}  // namespace hzp::workloads
