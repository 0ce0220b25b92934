// The state a scheduler hands to `hzpbench run --dump-tensors` (Scheduler::visit_state): a flat buffer of
// one component cut into the model's named tensors, and the whole state of a data-parallel scheduler
// gathered from its shards, so every scheduler dumps exactly what `none` dumps.
#pragma once

#include <string_view>
#include <vector>

#include "hzp/collectives/communicator.hpp"

#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/param_layout.hpp"
#include "hzp/workloads/precision.hpp"

namespace hzp::schedulers {

/// Hands `flat` (one component, [N] in the layout's order, host memory) to `visitor` tensor by tensor.
void visit_flat_component(const workloads::ParamLayout& layout, std::string_view component, ConstTensorView flat,
                          StateVisitor& visitor);

/// Collective over the scheduler's ranks: gathers param (in the parameter dtype), master (bf16-mixed only),
/// grad, m and v, and hands them over on `root` only (the other ranks' visitors get nothing), in none's
/// order and names. With a tensor-parallel group `tp` (size > 1; its traffic should be uncounted), every piece
/// is all-gathered over it and handed over whole, in the unsharded model's shape; the expert pieces (shard group
/// "ep") likewise over `ep` when given.
void visit_gathered_state(DataParallelScheduler& s, const workloads::ParamLayout& layout,
                          workloads::Precision precision, bool root, coll::Communicator* tp, StateVisitor& visitor,
                          coll::Communicator* ep = nullptr);

/// The whole tensor of which `piece` is this rank's (t.shard: consecutive pieces along t.shard.dim, piece i on
/// rank i of `tp`), all-gathered over `tp` (collective; fp32), in t.global_shape's row-major order.
std::vector<float> gather_tensor_pieces(const workloads::ParamTensor& t, ConstTensorView piece, coll::Communicator& tp);

}  // namespace hzp::schedulers
