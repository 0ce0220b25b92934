// ShardedOptimizer: AdamW over one rank's slice of the parameters (docs/data-parallel.md): fp32 master
// (bf16-mixed only; in fp32 the parameter slice is the master), m and v for the slice, the global
// gradient norm from sums of squares all-reduced over the group whose slices partition the model, the
// clipping coefficient, and the bf16 working copy written by the update. Used by ddp (the whole model as
// one slice), zero1/2/3, hsdp and asynchzp (its z1 slice).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/workloads/train_config.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::coll {
class Communicator;
}

namespace hzp::schedulers {

class StateArchive;

struct OptimizerStepResult {
  double grad_norm = 0;         ///< global L2 norm of the (reduced) gradient, before clipping
  double clip_coefficient = 1;  ///< what the update scaled gradients by
  double lr = 0;
};

/// The slice is a list of *pieces*: views of the working parameters (param dtype) whose concatenation,
/// in list order, is the slice (pieces of a padded full buffer for zero1/2, one contiguous shard for
/// zero3). m, v and the master are contiguous [slice_numel] buffers in that order, and the gradient
/// handed to step() is too. Single-threaded; deterministic; element-wise, so any slicing of the model
/// gives each element the same bits (kernels/adamw.hpp).
class ShardedOptimizer {
 public:
  /// Fills the master slice (fp32, [slice_numel], padding included) with its initial values; called once.
  using InitFn = std::function<void(std::span<float> master)>;

  /// Allocates m, v (tags m, v) and, in bf16-mixed, the master (tag master); initialises the master via
  /// `init` and writes the working pieces from it (bf16 rounding once, as an update would). Every kernel runs on
  /// `stream`, whose device is the allocator's and the pieces' (on a GPU `init` fills a host staging copy).
  ShardedOptimizer(const workloads::TrainConfig& train, std::vector<TensorView> param_pieces,
                   CachingAllocator& alloc, const InitFn& init, StreamRef stream = StreamRef::host());
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  std::int64_t slice_numel() const noexcept { return numel_; }

  /// Σ g² over `grads` ([slice_numel] fp32), all-reduced (fp64 sum) over `norm_group` when given: the
  /// group whose members' slices together cover the model exactly once. Blocking, collective over it.
  double global_sum_squares(ConstTensorView grads, coll::Communicator* norm_group) const;
  /// The same over parts of the slice (the elements a tensor-parallel rank counts, distinct_norm.hpp).
  double global_sum_squares(std::span<const ConstTensorView> parts, coll::Communicator* norm_group) const;

  /// One update of step `step` (0-based; AdamW's bias correction uses step + 1) with learning rate `lr`
  /// and the norm from global_sum_squares: computes the clip coefficient, runs AdamW on every piece and
  /// refreshes the working pieces. Gradients are not modified (the clip is AdamW's gradient scale).
  OptimizerStepResult step(ConstTensorView grads, double sum_squares, std::int64_t step, double lr);

  /// Checkpoints (checkpoint_state.cpp): master (in fp32 the pieces), m and v of the slice, whose real elements are
  /// `runs` (ShardLayout::flat_runs; local offsets into the slice), saved when `writer` (one replica of each slice)
  /// or loaded; loading rewrites the working pieces from the master (bf16 rounds once, as an update does).
  void checkpoint(StateArchive& archive, std::span<const ShardLayout::FlatSliceRun> runs, bool writer);

  /// Whether a separate fp32 master exists (bf16-mixed); in fp32 the pieces are the master.
  bool has_master() const noexcept { return static_cast<bool>(master_); }
  /// State views for checksums and tests ([slice_numel] fp32). master() requires has_master().
  ConstTensorView master() const;
  ConstTensorView m() const;
  ConstTensorView v() const;

 private:
  workloads::TrainConfig train_;
  std::vector<TensorView> pieces_;
  CachingAllocator* alloc_;
  StreamRef stream_ = StreamRef::host();
  std::int64_t numel_ = 0;
  Allocation master_, m_, v_;
  TensorView f32(const Allocation& a, std::int64_t begin, std::int64_t n) const;
};

/// The InitFn of slice `index` of every segment of `layout` (a slice buffer): each slice's real elements
/// from the model's counter-based initialiser, whose values depend on (seed, global index) alone, so every
/// shard starts from exactly the parameters `none` starts from. `model` and `layout` must outlive the call.
ShardedOptimizer::InitFn slice_initializer(const workloads::Workload& model, const ShardLayout& layout, int index,
                                           std::uint64_t seed);

/// The learning rate of step `step` (0-based): linear warm-up over warmup_steps from lr/warmup_steps to
/// lr, then cosine to lr_min at `steps`, lr_min after. Written separately from `none`'s on purpose: the
/// oracle shares no step logic with the schedulers it checks.
double scheduled_learning_rate(const workloads::TrainConfig& train, std::int64_t step);

}  // namespace hzp::schedulers
