// The Llama decoder as a Workload (private to hzp_workloads; the public face is llama.hpp): the model
// class, its per-micro-batch context (what each unit saves for backward), and the per-unit forward and
// backward functions, which live in llama_block.cpp (transformer blocks) and llama_ends.cpp
// (embedding and head).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/moe.hpp"
#include "hzp/workloads/ring_exchange_lane.hpp"
#include "hzp/workloads/workload.hpp"
#include "llama/llama_ops.hpp"

namespace hzp::workloads::llama {

/// What a transformer block keeps between its forward and its backward. Under recompute only x is
/// kept by forward; backward rebuilds the rest from it before using them.
struct BlockActs {
  Act x;                 // the block's input (the residual stream), [N, d]
  Act h1, rstd1;         // attention RMSNorm output and its 1/rms per row
  Act q, k, v;           // projections after RoPE (q, k) — what attention_bwd needs
  Act att, lse;          // attention output [N, H·hd] and its per-row log-sum-exp
  Act x2;                // residual stream after attention
  Act h2, rstd2;         // MLP RMSNorm output and its 1/rms per row
  Act g, u, a;           // gate and up projections, SwiGLU output [N, F] (an MoE block's shared experts)
  MoeSaved moe;          // an MoE block's routed experts
  void reset_all() noexcept;
  void reset_internals() noexcept;  // everything but x
};

/// What the head keeps: its input, the final RMSNorm, the logits (under recompute only x). Vocabulary-parallel
/// (tensor parallelism): the logits are the rank's [tokens, V/tp] columns, and the softmax's row maxima and sums
/// of exponentials over the whole vocabulary ([2, tokens]: maxima, then sums) are kept under recompute too, so
/// backward's rebuilt logits need no second round of their all-reduces.
struct HeadActs {
  Act x, h, rstd, logits;
  Act softmax_stats;
  void reset_all() noexcept;
};

/// The MoE balancing state of a model: the bias per MoE layer and expert (bias balancing), and what this rank's
/// forwards observed since the statistics were last taken (per layer: the load of every expert, the dropped
/// assignments, the weighted auxiliary loss). Forwards record under a lock (contexts may run on several
/// threads); the bias changes only in end_step, between steps, so every forward of a step routes alike.
class MoeBalanceState {
 public:
  MoeBalanceState(const MoeConfig& config, std::int64_t moe_layers);
  /// Layer `layer`'s bias (empty under aux_loss balancing: nothing is added to the scores).
  std::vector<double> bias(std::int64_t layer) const;
  void record(std::int64_t layer, const MoeRouting& routing, double weighted_aux);
  /// [load: layers × experts][dropped: layers][aux: layers], then cleared.
  std::vector<double> take();
  void end_step(std::span<const double> global);
  std::vector<double> last_step() const;
  std::int64_t layers() const noexcept { return layers_; }
  /// The bias for a checkpoint ([layers × experts]; empty under aux_loss), and its restore.
  std::vector<double> saved_bias() const;
  void restore_bias(std::span<const double> bias);

 private:
  MoeConfig config_;
  std::int64_t layers_;
  mutable std::mutex mutex_;
  std::vector<double> bias_;     // [layers × experts]
  std::vector<double> counts_;   // the layout take() returns
  std::vector<double> last_;     // the last end_step's global statistics
};

class LlamaContext final : public MicroBatchContext {
 public:
  /// seq_len: the tokens of each sequence it holds (the whole sequence, or a context-parallel rank's share);
  /// rows: the activation rows between units ([tokens/tp] under sequence parallelism, else every token);
  /// positions: under context parallelism the global position of every token row ([tokens]), else empty.
  LlamaContext(CachingAllocator& alloc, const ContextOptions& options, const LlamaConfig& config, int num_units,
               DType act_dtype, std::int64_t seq_len, std::int64_t rows, std::vector<std::int32_t> positions);
  ConstTensorView logits() const override;
  Shape boundary_shape() const override { return Shape{rows_, hidden_width_}; }
  /// Context parallelism: int32 [tokens], the position RoPE gives each token row, in the stream's memory (a GPU
  /// context's copy, made once: the shard's positions are the same for every micro-batch).
  ConstTensorView positions() const noexcept {
    const Shape shape{static_cast<std::int64_t>(positions_.size())};
    if (device_positions_) return ConstTensorView(device_positions_.data(), shape, DType::i32, stream().device());
    return ConstTensorView(positions_.data(), shape, DType::i32);
  }
  /// With document packing (document_first() non-empty): int32 [tokens], each token's position inside its document
  /// (its position in the sequence, global under context parallelism, minus its document's start), what RoPE reads
  /// so that a packed document is rotated as if it ran alone. Made once per micro-batch (checking document_first),
  /// in the stream's memory (a GPU context uploads them).
  ConstTensorView document_positions();
  /// Context parallelism on a CUDA stream: the stream and events ring attention's exchanges use in every block of
  /// this context (ContextOptions::ring_lane, or made once with the context when none was given), else null.
  RingExchangeLane* ring_lane() noexcept { return ring_lane_; }

  std::vector<BlockActs> blocks;  // one per transformer block
  HeadActs head;
  Act hidden;   // output of the last forward unit: the next unit's input
  Act dhidden;  // gradient of the next backward unit's output

 protected:
  void release_all() override;
  TensorView allocate_boundary(bool gradient) override;
  ConstTensorView boundary(bool gradient) const override;
  void drop_boundary(bool gradient) override;

 private:
  std::int64_t hidden_width_;
  DType act_dtype_;
  std::int64_t rows_;
  std::vector<std::int32_t> positions_;
  Allocation device_positions_;  // a GPU context's copy of positions_ (context parallelism), uploaded at construction
  std::vector<std::int32_t> document_positions_;  // cleared by release_all(), i.e. by every begin()
  Allocation device_document_positions_;          // a GPU context's copy, allocated at the first packed micro-batch
  std::unique_ptr<RingExchangeLane> own_ring_lane_;
  RingExchangeLane* ring_lane_ = nullptr;  // the options' lane or own_ring_lane_
};

/// Dimensions used everywhere in the units (N = tokens of a micro-batch; seq = the tokens of each sequence the
/// context holds, a context-parallel rank's share).
struct Dims {
  std::int64_t batch, seq, tokens, hidden, heads, kv_heads, head_dim, ffn, vocab;
};

class LlamaModel final : public Workload {
 public:
  LlamaModel(const LlamaConfig& config, Precision precision, const TensorParallel& tp, const StageCut& stage,
             const ContextParallel& cp, const ExpertParallel& ep);
  std::string describe() const override { return config_.describe(); }
  FlopsPerToken flops_per_token() const override { return config_.flops_per_token(); }
  const LlamaConfig& config() const noexcept { return config_; }
  std::vector<double> take_step_statistics() const override;
  void end_step(std::span<const double> global) const override;
  std::vector<StepMetric> step_metrics() const override;
  std::vector<double> checkpoint_state() const override;
  void restore_checkpoint_state(std::span<const double> state) const override;

 protected:
  std::unique_ptr<MicroBatchContext> new_context(CachingAllocator& allocator, const ContextOptions& options) const override;
  void forward_unit(int unit, const UnitParams& params, MicroBatchContext& ctx) const override;
  void backward_unit(int unit, const UnitParams& params, MicroBatchContext& ctx, const UnitGrads& grads) const override;

 private:
  Dims dims(const MicroBatchContext& ctx) const;
  // llama_ends.cpp
  void embedding_forward(const UnitParams& params, LlamaContext& ctx) const;
  void embedding_backward(LlamaContext& ctx, const UnitGrads& grads) const;
  void head_forward(const UnitParams& params, LlamaContext& ctx, bool recomputing) const;
  void head_backward(const UnitParams& params, LlamaContext& ctx, const UnitGrads& grads) const;
  /// Vocabulary-parallel softmax cross-entropy of the head's logits slice (tensor parallelism): fills
  /// ctx.head.softmax_stats and returns the loss sum over every token.
  double vocab_parallel_loss(LlamaContext& ctx) const;
  /// The first vocabulary row this rank holds.
  std::int64_t vocab_begin() const noexcept { return config_.vocab / tp_size_ * tp_rank_; }
  // llama_block.cpp. block_compute fills every saved tensor of `s` from s.x; with `out` it also
  // computes the block's output (skipped when backward recomputes, which does not need it).
  void block_compute(int unit, const UnitParams& params, LlamaContext& ctx, BlockActs& s, Act* out) const;
  void block_backward(int unit, const UnitParams& params, LlamaContext& ctx, const UnitGrads& grads) const;
  // moe_block.cpp: the routed experts of an MoE block on its normed input s.h2; forward adds their output to `y`
  // (none: a recompute, which neither combines nor counts the routing again).
  /// The token rows this rank runs the routed experts on: every row, or under tensor parallelism its 1/tp share.
  MoeTokenRows moe_rows(const LlamaContext& ctx) const;
  void moe_forward(int unit, const UnitParams& params, LlamaContext& ctx, BlockActs& s, TensorView y) const;
  void moe_backward(int unit, const UnitParams& params, LlamaContext& ctx, BlockActs& s, const UnitGrads& grads,
                    ConstTensorView dy, TensorView dh2) const;
  /// The SwiGLU width of the block at `unit` on this rank (0: an MoE block without shared experts).
  std::int64_t block_ffn(int unit) const noexcept { return config_.mlp_width(unit - 1) / tp_size_; }

  int head_unit() const noexcept { return static_cast<int>(config_.layers) + 1; }
  /// Reduces `v` over the tensor-parallel group in place (a sum unless `op` says otherwise; nothing without a
  /// group), on the context's stream. Like the two below, the request goes to the context's keeper
  /// (ContextOptions::requests): kept to the step's end on a CUDA stream (every later user of `v` is ordered after
  /// the collective on that stream), waited for at once on the host, where the wait is timed as communication.
  void tp_all_reduce(TensorView v, LlamaContext& ctx, coll::ReduceOp op = coll::ReduceOp::sum) const;
  /// Sequence parallelism: every rank's rows into `full` / the sum over the group of `full`'s rows into this
  /// rank's `rows`.
  void tp_all_gather(ConstTensorView rows, TensorView full, LlamaContext& ctx) const;
  void tp_reduce_scatter(ConstTensorView full, TensorView rows, LlamaContext& ctx) const;
  /// How many rows of a [tokens, ...] tensor this rank holds: tokens / tp under sequence parallelism.
  std::int64_t local_rows(const Dims& d) const noexcept { return sp_ ? d.tokens / tp_size_ : d.tokens; }
  /// The layer norm at `t` of `unit` applied to rows `x` (saving rstd), returned over every token: gathered
  /// under sequence parallelism.
  Act norm_for_column_parallel(int unit, int t, const UnitParams& params, LlamaContext& ctx, const Act& x,
                               Act& rstd) const;
  /// A norm's backward on this rank's rows; under sequence parallelism its weight gradient covers only these
  /// rows and is summed over the group before it is written (overwriting or accumulating as `dweight` says).
  void norm_backward(int unit, int t, const UnitParams& params, LlamaContext& ctx, TensorView dx, ConstTensorView dh,
                     const Act& x, const Act& rstd, const UnitGrads::Block& grad) const;
  /// A [tokens, d] tensor of which this rank holds its share of a sum over the group (a row-parallel matmul's
  /// output, or the gradient of a column-parallel pair's input) made whole on this rank's rows: all-reduced in
  /// place, or reduce-scattered into a fresh [rows, d] activation under sequence parallelism.
  Act sum_partial(Act partial, LlamaContext& ctx) const;
  /// Sequence parallelism: every rank's [rows, d] gathered into a fresh [tokens, d] activation.
  Act gather_rows(ConstTensorView rows, LlamaContext& ctx) const;
  DType act_dtype() const noexcept { return activation_dtype(precision()); }
  /// rstd and lse: fp32, fp64 in fp64 mode (what the kernels write).
  DType stat_dtype() const noexcept { return precision() == Precision::fp64 ? DType::f64 : DType::f32; }

  /// Attention of the block's saved q, k, v into s.att and s.lse: whole sequences, or ring attention over the
  /// context-parallel group. And its backward.
  void attention_forward(LlamaContext& ctx, BlockActs& s) const;
  void attention_backward(LlamaContext& ctx, BlockActs& s, TensorView dq, TensorView dk, TensorView dv,
                          ConstTensorView datt) const;
  /// The ring over the context-parallel group for this context's micro-batch (the rank's heads, the activation dtype).
  RingAttention ring_attention(LlamaContext& ctx) const;
  /// RoPE on q or k [tokens, heads, head_dim] in place: at positions t mod seq_len, or at the context shard's.
  void rope(LlamaContext& ctx, TensorView x, bool backward) const;

  LlamaConfig config_;
  mutable MoeBalanceState balance_;  // non-gradient state, changed by end_step only
  coll::Communicator* cp_;  // nullptr: whole sequences on this rank
  coll::Communicator* tp_;  // nullptr: the whole model on this rank
  coll::Communicator* ep_;  // nullptr: every routed expert on this rank
  int tp_size_, tp_rank_;
  bool sp_;
};

}  // namespace hzp::workloads::llama
