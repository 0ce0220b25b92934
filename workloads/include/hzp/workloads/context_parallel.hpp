// How a model is split over a context-parallel group (docs/workloads.md "Context parallelism"): the group the
// model takes at construction. Every sequence is cut as ContextShard says; a rank runs its tokens through every
// per-token layer alone and meets the group only in attention (ring attention, ring_attention.hpp).
#pragma once

namespace hzp::coll {
class Communicator;
}

namespace hzp::workloads {

/// The model's context-parallel group (must outlive the model); nullptr or a group of one: whole sequences on
/// this rank. Rank r of a group of cp holds chunks r and 2·cp − 1 − r of every sequence.
struct ContextParallel {
  coll::Communicator* group = nullptr;
};

}  // namespace hzp::workloads
