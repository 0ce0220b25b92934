// How an MoE model is split over an expert-parallel group (docs/workloads.md "Expert parallelism"): the group the
// model takes at construction, and what the plan asks it about the all-to-alls its MoE layers issue. Rank p of a
// group of P holds routed experts p·E/P .. (p+1)·E/P − 1 of every MoE layer; everything else (attention, norms,
// shared experts, the router) is whole on every rank, which runs its own tokens (ep ranks are data-parallel ranks).
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

/// The model's expert-parallel group (must outlive the model); nullptr or a group of one: every expert here.
struct ExpertParallel {
  coll::Communicator* group = nullptr;
};

/// What the plan asks an MoE model about an expert-parallel run.
struct ExpertParallelRun {
  int ep = 1;
  int tp = 1;  ///< the tensor-parallel ranks split each micro-batch's token rows for the routed experts
  int cp = 1;  ///< a context-parallel rank holds seq_len / cp tokens of each sequence
  bool recompute = false;
  std::int64_t micro_batch_size = 1;
  Precision precision = Precision::fp32;
};

/// One kind of expert-parallel collective of a unit per micro-batch: `times` calls of `elements` each (what the
/// counters record: all_to_all and all_to_allv count every element a rank sends, its own share included). The
/// all-to-all-v's counts depend on the routing, which no plan can know: `elements` is then the balanced
/// expectation (every expert chosen equally often, nothing dropped) and `expected` says so.
struct ExpertParallelCall {
  coll::CollOp op = coll::CollOp::all_to_allv;
  std::int64_t elements = 0;
  DType dtype = DType::f32;
  std::int64_t times = 1;
  bool expected = false;
  std::string what;  ///< e.g. "dispatch: token rows to their experts' ranks"
};

}  // namespace hzp::workloads
