// The `train.*` keys as a plain struct: batch split, optimizer and schedule hyper-parameters, numerics.
// It lives in the workload layer because presets (presets.hpp) carry training defaults with each model
// shape; schedulers read it, and each scheduler implements the schedule itself (see schedulers/none).
#pragma once

#include <cstdint>

#include "hzp/workloads/precision.hpp"

namespace hzp::workloads {

struct TrainConfig {
  std::int64_t global_batch = 16;     ///< sequences per optimizer step (all ranks together)
  std::int64_t micro_batch_size = 2;  ///< sequences per forward/backward
  std::int64_t steps = 300;           ///< optimizer steps of the run (the cosine ends here)
  std::int64_t warmup_steps = 30;     ///< linear warm-up from lr/warmup_steps to lr
  double lr = 3e-3;                   ///< peak learning rate
  double lr_min = 3e-4;               ///< the cosine's floor, reached at `steps`
  double clip = 1.0;                  ///< global gradient-norm clipping threshold; 0 = off
  double weight_decay = 0.1;          ///< decoupled (AdamW), applied to every parameter
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  bool recompute = false;             ///< full activation recompute
  /// Deterministic mode (docs/deterministic.md): gradient sums in 64-bit fixed point, exact norm, loss in
  /// micro-batch order, so every data-parallel scheduler at any W matches `none` bitwise.
  bool deterministic = false;
  Precision precision = Precision::fp32;
  std::uint64_t seed = 0;             ///< parameter initialisation (the data has its own seed)

  /// ConfigError listing every problem, each naming its key(s) and value(s): sizes not positive,
  /// micro_batch_size not dividing global_batch, warmup_steps > steps, lr_min > lr, betas outside
  /// [0, 1), negative eps/clip/weight_decay, deterministic with fp64.
  void validate() const;
  std::int64_t micro_batches() const noexcept { return micro_batch_size > 0 ? global_batch / micro_batch_size : 0; }
};

}  // namespace hzp::workloads
