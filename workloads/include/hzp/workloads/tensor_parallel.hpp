// How a model is split over a tensor-parallel group (docs/workloads.md "Tensor parallelism"): the group the model
// takes at construction, and, for the plan, what it is asked about a run and the collectives it declares per unit.
#pragma once

#include <cstdint>
#include <string>

#include "hzp/collectives/types.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/workloads/precision.hpp"

namespace hzp::coll {
class Communicator;
}

namespace hzp::workloads {

/// The model's tensor-parallel group and mode.
struct TensorParallel {
  /// The group (must outlive the model); nullptr or a group of one: the whole model on this rank.
  coll::Communicator* group = nullptr;
  /// Megatron's sequence parallelism: the residual stream, the norms and the residual adds on 1/tp of the
  /// tokens; an all-gather before each column-parallel pair and a reduce-scatter after each row-parallel
  /// matmul instead of the all-reduces, and the norm weights' gradients summed over the group.
  bool sequence_parallel = false;
};

/// What the plan asks a model about: the degree and mode, and the micro-batch it runs.
struct TensorParallelRun {
  int tp = 1;
  /// Context-parallel degree: each rank holds 1/cp of every sequence's tokens.
  int cp = 1;
  bool sequence_parallel = false;
  bool recompute = false;
  std::int64_t micro_batch_size = 1;
  Precision precision = Precision::fp32;
};

/// One kind of tensor-parallel collective of a unit per micro-batch: `times` calls of `elements` each, counted
/// as the counters record them (all_gather: the rows each rank sends; reduce_scatter: the full input;
/// all_reduce: the buffer).
struct TensorParallelCall {
  coll::CollOp op = coll::CollOp::all_reduce;
  std::int64_t elements = 0;
  DType dtype = DType::f32;
  std::int64_t times = 1;
  std::string what;  ///< e.g. "row-parallel outputs"
};

}  // namespace hzp::workloads
