// The workload interface (docs/workloads.md): a model is a ParamLayout of units plus forward(unit) and
// backward(unit) calls that a scheduler drives one at a time, handing each call the full (gathered)
// parameter blocks it needs and receiving the gradients it writes. Per-micro-batch state (tokens,
// saved activations, the loss) lives in a MicroBatchContext, so the model object itself is immutable
// and may be shared by threads. Schedulers see models only through this header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/workloads/context_shard.hpp"
#include "hzp/workloads/param_layout.hpp"
#include "hzp/workloads/precision.hpp"

namespace hzp::coll {
class StreamOrderedRequests;
}

namespace hzp::workloads {

struct RingExchangeLane;

/// Model FLOPs per trained token (forward + backward), under the two conventions results report:
/// 6·N_matmul + 12·L·heads·head_dim·T (attention not discounted for the causal mask: PaLM/Megatron's
/// MFU convention) and the same with the attention term halved (only the unmasked half is useful
/// work). N_matmul counts every weight used in a matmul, LM head included, embedding lookup excluded.
struct FlopsPerToken {
  double full_attention = 0;
  double causal_attention = 0;
  /// N_matmul counts only the weights a token uses (an MoE model's top-k routed experts, not all of them), so
  /// MFU is measured against the active parameters; results and summaries say so.
  bool active_only = false;
};

/// The full parameter blocks one call reads: its own unit's and those of the units it uses, each a
/// 1-D view [unit numel] in param_dtype(precision). Only the views are held, never the memory.
class UnitParams {
 public:
  UnitParams& set(int unit, ConstTensorView block);
  /// The block of `unit`; PreconditionError naming the unit when the caller did not provide it.
  ConstTensorView block(int unit) const;
  bool has(int unit) const noexcept;

 private:
  struct Entry {
    int unit;
    ConstTensorView view;
  };
  std::vector<Entry> entries_;
};

/// The gradient blocks one backward call writes ({unit} ∪ uses(unit)), each a 1-D view [unit numel] in
/// grad_dtype(precision). accumulate = false: the call overwrites the block (dW =); true: it adds
/// (dW +=), for accumulation over micro-batches and for the later writers of a shared block.
class UnitGrads {
 public:
  struct Block {
    TensorView view;
    bool accumulate = false;
  };
  UnitGrads& set(int unit, TensorView block, bool accumulate);
  const Block& block(int unit) const;
  bool has(int unit) const noexcept;

 private:
  struct Entry {
    int unit;
    Block block;
  };
  std::vector<Entry> entries_;
};

/// What a context is made for. micro_batch_size sequences per micro-batch, each of the workload's
/// local_seq_len() tokens (its whole seq_len, or the rank's share under context parallelism).
struct ContextOptions {
  std::int64_t micro_batch_size = 1;
  /// Full activation recompute (train.recompute): forward keeps only each unit's input; backward
  /// re-runs that unit's forward first. Results are bitwise identical either way.
  bool recompute = false;
  /// Where every kernel of the context runs; the training loop owns it. The host stream runs them
  /// synchronously on the calling thread. A CUDA stream needs an allocator of that device (activations,
  /// parameters and gradients all live there) and enqueues the kernels on it: forward and backward then
  /// return before the device has finished, except that the last forward waits for the loss.
  StreamRef stream = StreamRef::host();
  /// The units this context runs, [first_unit, end_unit) (a pipeline stage; end_unit = -1: through the last
  /// unit). A context not starting at unit 0 takes its input activation from outside (input_slot()); one
  /// ending before the last unit hands its output out (output()) and takes the gradient of that output back
  /// (output_grad_slot()); one not starting at unit 0 then gives the gradient of its input (input_grad()).
  int first_unit = 0;
  int end_unit = -1;
  /// Where the model's own collectives (tensor parallelism's sums and gathers, the vocabulary-parallel softmax's
  /// statistics, ring attention's K/V exchanges under context parallelism) settle their requests: on a CUDA stream
  /// the keeper holds them until its owner (the step driver) completes them once per step; on the host it waits at
  /// once (ring attention then waits for its exchanges as without a keeper). It must be on `stream` and outlive the
  /// context's micro-batches. nullptr: each is waited for where it is issued (the blocking form; ring attention's at
  /// the end of each pass).
  coll::StreamOrderedRequests* requests = nullptr;
  /// Context parallelism on a CUDA stream: the stream and events ring attention's exchanges use (the caller's, kept
  /// across contexts: a pipeline stage makes a context per micro-batch and chunk, and creating a stream per context
  /// is slow and may synchronise). It must be on `stream`'s device and outlive the context; the ring's passes must
  /// be issued one after another by one host thread (a stage's), so that they queue on the lane in that order and
  /// each pass's event waits are enqueued before the next pass re-records the events (a wait takes the event as it
  /// is when enqueued; the requests themselves may be kept to the step's end). nullptr: the context makes its own.
  RingExchangeLane* ring_lane = nullptr;
};

/// Per-micro-batch state: the tokens, every activation forward saves for backward (allocated from the
/// given allocator, tag `activation`; kernel scratch tag `workspace`), and the loss. Reused for
/// micro-batch after micro-batch. One thread at a time.
///
/// Life of one micro-batch: begin(...); forward(0..U−1); [loss_sum(), logits()]; backward(U−1..0).
/// A context over a unit range [a, b) (a pipeline stage) runs the same life on its range:
///   begin(...); [a > 0: fill input_slot()]; forward(a..b−1); [b < U: read output()];
///   [b < U: fill output_grad_slot()]; backward(b−1..a); [a > 0: read input_grad()].
/// The order is checked relative to the range: a call out of order, or a missing input or output gradient,
/// throws PreconditionError naming what was expected. After the last backward every activation has been
/// returned to the allocator except input_grad(). A micro-batch may also stop after its forwards
/// (evaluation): begin() then starts the next one and frees what is held.
class MicroBatchContext {
 public:
  virtual ~MicroBatchContext();
  MicroBatchContext(const MicroBatchContext&) = delete;
  MicroBatchContext& operator=(const MicroBatchContext&) = delete;

  /// Starts a micro-batch. inputs and targets are row-major [micro_batch_size, seq_len()] int32 (held by
  /// reference until the next begin(); on a CUDA stream also copied to the device, enqueued, so the
  /// caller may refill its host buffers as soon as begin() returns). normaliser (> 0) is the number of target tokens of the whole
  /// GLOBAL batch, so that the micro-batch losses loss_sum()/normaliser add up to the global mean at
  /// any world size, and backward's gradients to the gradient of that mean. A stage that does not run
  /// unit 0 may pass empty inputs, one that does not run the last unit empty targets.
  /// document_first (data.packing = documents; held by reference like the tokens): [micro_batch_size, seq_len()]
  /// int32, each token's document start as a GLOBAL position of its sequence (under context parallelism the
  /// shard's tokens keep their global positions); attention then stays inside documents and RoPE positions restart
  /// at each (position − first), so a packed sequence computes exactly its documents run apart (on a CUDA stream it
  /// is copied to the device too). Empty: one document per sequence. Every stage of a pipeline and every rank of a tp/cp group is given the same documents.
  void begin(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, double normaliser,
             std::span<const std::int32_t> document_first = {});

  /// The unit range, [first_unit(), end_unit()).
  int first_unit() const noexcept { return first_unit_; }
  int end_unit() const noexcept { return end_unit_; }
  /// Shape of the activation between two units, [tokens, width] (what a stage receives and sends).
  virtual Shape boundary_shape() const = 0;
  /// first_unit() > 0, after begin() and before forward(first_unit()): allocates the stage's input
  /// activation (boundary_shape(), the activation dtype, on the stream's device) for the caller to fill.
  TensorView input_slot();
  /// end_unit() < U, after forward(end_unit() − 1): the stage's output, held until output_grad_slot() or
  /// the next begin().
  ConstTensorView output() const;
  /// end_unit() < U, before backward(end_unit() − 1): frees output() and allocates the buffer the caller
  /// fills with the gradient of the loss with respect to it.
  TensorView output_grad_slot();
  /// The same slot while output() stays held (a receive posted before the output's send has completed: a pipeline
  /// stage on a GPU posts it an action early); the output is freed when backward(end_unit() − 1) starts, so the
  /// caller must have seen its last reader finish by then.
  TensorView output_grad_slot_keeping_output();
  /// first_unit() > 0, after backward(first_unit()): the gradient of the stage's input, held until the next
  /// begin().
  ConstTensorView input_grad() const;

  /// Σ of this micro-batch's per-token losses in nats (fp64, token order), after the last forward.
  double loss_sum() const;
  /// loss_sum() / normaliser: this micro-batch's share of the global mean loss.
  double loss() const { return loss_sum() / normaliser_; }
  double normaliser() const noexcept { return normaliser_; }
  /// The LM head's logits [micro_batch_size·seq_len(), vocab] (activation dtype), from the last forward
  /// until the last unit's backward.
  virtual ConstTensorView logits() const = 0;

  std::int64_t micro_batch_size() const noexcept { return options_.micro_batch_size; }
  /// Tokens of each sequence this context holds: the workload's local_seq_len().
  std::int64_t seq_len() const noexcept { return seq_len_; }
  std::int64_t tokens() const noexcept { return options_.micro_batch_size * seq_len_; }
  bool recompute() const noexcept { return options_.recompute; }
  CachingAllocator& allocator() const noexcept { return *allocator_; }
  std::span<const std::int32_t> inputs() const noexcept { return inputs_; }
  std::span<const std::int32_t> targets() const noexcept { return targets_; }
  /// begin()'s document_first (empty: one document per sequence), in host memory.
  std::span<const std::int32_t> document_first() const noexcept { return document_first_; }
  /// The same in the stream's memory, what the attention kernels read: the host span on the host, the context's
  /// device copy (made by begin(), like the tokens') on a GPU.
  std::span<const std::int32_t> stream_document_first() const noexcept;
  StreamRef stream() const noexcept { return options_.stream; }
  /// ContextOptions::requests (nullptr: the model's collectives are waited for where they are issued).
  coll::StreamOrderedRequests* requests() const noexcept { return options_.requests; }
  /// The inputs and targets as int32 [tokens] views on the stream's device: the host spans themselves
  /// on the host, or the context's device copy (made by begin()) on a GPU.
  ConstTensorView input_tokens() const;
  ConstTensorView target_tokens() const;

 protected:
  MicroBatchContext(CachingAllocator& allocator, const ContextOptions& options, std::int64_t seq_len,
                    int num_units);
  /// Frees every activation held (called by begin() before a new micro-batch).
  virtual void release_all() = 0;
  /// The activation between units the model passes along: the last forward's output (gradient = false) or
  /// the gradient of the next backward's output (true). allocate_boundary replaces it with a fresh
  /// boundary_shape() buffer; drop_boundary frees it.
  virtual TensorView allocate_boundary(bool gradient) = 0;
  virtual ConstTensorView boundary(bool gradient) const = 0;
  virtual void drop_boundary(bool gradient) = 0;
  void set_loss_sum(double v) noexcept { loss_sum_ = v; }

 private:
  friend class Workload;
  TensorView take_output_grad_slot(bool keep_output);  // the two output-gradient slots' one body
  CachingAllocator* allocator_;
  ContextOptions options_;
  std::int64_t seq_len_;
  int num_units_;
  std::span<const std::int32_t> inputs_, targets_, document_first_;
  Allocation device_tokens_;  // CUDA contexts: inputs then targets, allocated at the first begin()
  Allocation device_first_;   // CUDA contexts with packed documents: document_first, allocated at the first such begin()
  double normaliser_ = 0;
  double loss_sum_ = 0;
  int first_unit_ = 0, end_unit_ = 0;
  // The order check: forwards done so far this micro-batch (counted as the next unit to run), and the next
  // backward expected; whether a stage's input and its output's gradient have been provided.
  int forwards_done_ = -1;  // -1: no micro-batch begun
  int next_backward_ = -1;
  bool input_given_ = false, output_grad_given_ = false;
  bool output_kept_ = false;  // output_grad_slot_keeping_output(): free the output at the first backward
};

/// A named per-step series a model reports beside the loss (the MoE load of each layer and expert, ...): one
/// value per element, the same length every step.
struct StepMetric {
  std::string name;     ///< e.g. "moe/load" (the results file's dataset under steps/)
  std::string units;    ///< e.g. "assignments"
  std::string meaning;  ///< one line, with the element order
  std::vector<double> values;
};

/// A model. Immutable after construction, except for state that is not trained by gradients (the MoE balancing
/// bias), which changes only in end_step, between steps: forward/backward are const and may run concurrently on
/// different contexts. Kernels run on the host stream (CPU); determinism: the same parameters, tokens
/// and options give bitwise-identical activations, losses and gradients.
class Workload {
 public:
  virtual ~Workload() = default;

  const ParamLayout& layout() const noexcept { return layout_; }
  Precision precision() const noexcept { return precision_; }
  /// The whole sequence length (what the data source produces and the loss normaliser counts).
  std::int64_t seq_len() const noexcept { return seq_len_; }
  std::int64_t vocab() const noexcept { return vocab_; }
  /// Context parallelism: this rank's share of every sequence (nullptr: whole sequences on this rank).
  const ContextShard* context_shard() const noexcept { return shard_ ? &*shard_ : nullptr; }
  /// Tokens of each sequence a context of this model takes: seq_len(), or the shard's local_len().
  std::int64_t local_seq_len() const noexcept { return shard_ ? shard_->local_len() : seq_len_; }
  /// One line for logs and results files: the model kind and its shape.
  virtual std::string describe() const = 0;
  virtual FlopsPerToken flops_per_token() const = 0;

  /// Non-gradient state updated once per step from the whole global batch (the MoE balancing bias). Every
  /// forward (not a recompute) records statistics; take_step_statistics returns this rank's since the last call
  /// and clears them (empty when the model has no such state), so a scheduler also calls it when a step, or a
  /// retried attempt, begins. The scheduler sums them over its data-parallel group (exact: they are counts) and
  /// hands the sum to end_step, which updates the state identically on every replica. `none` passes its own.
  virtual std::vector<double> take_step_statistics() const { return {}; }
  virtual void end_step(std::span<const double> global) const { (void)global; }
  /// What the last end_step saw, as named series for the results file (empty when the model has none).
  virtual std::vector<StepMetric> step_metrics() const { return {}; }
  /// That non-gradient state as numbers for a checkpoint (docs/checkpoints.md; empty when there is none), and its
  /// restore on resume, between steps. A pipeline stage's model holds the whole list but gives 0 for what belongs to
  /// units it does not run, so that the stages' lists summed are the whole model's; a restore takes the whole list.
  /// restore_checkpoint_state throws DataError when `state` is not what checkpoint_state() of this model would hold
  /// (another length).
  virtual std::vector<double> checkpoint_state() const { return {}; }
  virtual void restore_checkpoint_state(std::span<const double> state) const;

  /// See init_params in param_layout.hpp (std per tensor as the model declares it).
  void init_params(std::int64_t global_begin, std::span<float> out, std::uint64_t seed) const {
    workloads::init_params(layout_, global_begin, out, seed);
  }
  void init_params(std::int64_t global_begin, std::span<double> out, std::uint64_t seed) const {
    workloads::init_params(layout_, global_begin, out, seed);
  }

  /// A context for micro-batches of options.micro_batch_size sequences; activations come from
  /// `allocator`, which must outlive the context.
  std::unique_ptr<MicroBatchContext> make_context(CachingAllocator& allocator, const ContextOptions& options) const;

  /// Runs unit `unit`'s forward. params must hold the blocks of layout().param_blocks(unit). Reads the
  /// previous unit's output (or the stage's input) from ctx and leaves its own there; the last unit
  /// computes the loss.
  void forward(int unit, const UnitParams& params, MicroBatchContext& ctx) const;
  /// Runs unit `unit`'s backward (re-running its forward first under recompute), reading the gradient
  /// of its output from ctx and leaving the gradient of its input there. params as for forward (the
  /// same values); grads must hold the blocks of layout().grad_blocks(unit), in grad_dtype(precision).
  /// The activations the unit saved are freed before it returns.
  void backward(int unit, const UnitParams& params, MicroBatchContext& ctx, const UnitGrads& grads) const;

 protected:
  Workload(ParamLayout layout, Precision precision, std::int64_t seq_len, std::int64_t vocab);
  virtual std::unique_ptr<MicroBatchContext> new_context(CachingAllocator& allocator,
                                                         const ContextOptions& options) const = 0;
  virtual void forward_unit(int unit, const UnitParams& params, MicroBatchContext& ctx) const = 0;
  virtual void backward_unit(int unit, const UnitParams& params, MicroBatchContext& ctx,
                             const UnitGrads& grads) const = 0;
  static void set_loss_sum(MicroBatchContext& ctx, double v) noexcept { ctx.set_loss_sum(v); }
  /// A model split over a context-parallel group says which share of every sequence it runs (construction only).
  void set_context_shard(const ContextShard& shard) { shard_ = shard; }

 private:
  void check_blocks(int unit, const UnitParams& params, const UnitGrads* grads) const;

  ParamLayout layout_;
  Precision precision_;
  std::int64_t seq_len_;
  std::int64_t vocab_;
  std::optional<ContextShard> shard_;
};

/// Convenience for schedulers that hold every parameter in one flat buffer (none, ddp): the views of
/// param_blocks(unit) inside `flat` (1-D [total_numel]).
UnitParams unit_params_from_flat(const ParamLayout& layout, int unit, ConstTensorView flat);
/// The views of grad_blocks(unit) inside `flat`, each with its accumulate flag: a block accumulates
/// unless `fresh` is true and `unit` is the block's first writer (fresh = the buffer holds nothing of
/// this accumulation window yet, e.g. the first micro-batch of a step).
UnitGrads unit_grads_from_flat(const ParamLayout& layout, int unit, TensorView flat, bool fresh);

}  // namespace hzp::workloads
