// The parts of a checkpoint every scheduler shares (docs/checkpoints.md): the state beside the optimizer's arrays
// (deterministic mode's scales, the model's non-gradient state such as the MoE balancing bias), the whole-model
// run of a replicated scheduler, and asynchzp's refusal of the layouts it does not map yet.
#pragma once

#include <string_view>
#include <vector>

#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/state_archive.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::schedulers {

/// Saves or restores what is not a flat array: the model's checkpoint_state() and, in deterministic mode,
/// `fixed`'s scales (nullptr otherwise). Collective (StateArchive::numbers).
void checkpoint_side_state(StateArchive& archive, const workloads::Workload& model, FixedPointGrads* fixed);

/// The one run of a whole, unpadded flat buffer of `numel` elements.
std::vector<StateArchive::Run> whole_model_runs(std::int64_t numel);

/// UnsupportedError naming the scheduler and the fix when `dims` has tensor-parallel, pipeline or context-parallel
/// groups: asynchzp's z-slices of a stage or a context group are not mapped to the whole model yet (nd's engines
/// map theirs with model_runs.hpp).
void check_checkpoint_layout(std::string_view scheduler, const ParallelDims& dims);

}  // namespace hzp::schedulers
