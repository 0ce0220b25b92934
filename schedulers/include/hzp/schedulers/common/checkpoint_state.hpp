// The parts of a checkpoint every scheduler shares (docs/checkpoints.md): the state beside the optimizer's arrays
// (deterministic mode's scales, the model's non-gradient state such as the MoE balancing bias), the whole-model
// run of a replicated scheduler.
#pragma once

#include <string_view>
#include <vector>

#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/state_archive.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::schedulers {

/// Saves or restores what is not a flat array: the model's checkpoint_state() and, in deterministic mode,
/// `fixed`'s scales (nullptr otherwise). `stages`: the pipeline group (nullptr or size 1 without stages), over which
/// the stages' model states are summed before saving (each stage gives its own units' part, 0 elsewhere).
/// Collective (StateArchive::numbers, and an all-reduce over `stages` when saving).
void checkpoint_side_state(StateArchive& archive, const workloads::Workload& model, FixedPointGrads* fixed,
                           coll::Communicator* stages = nullptr);

/// The one run of a whole, unpadded flat buffer of `numel` elements.
std::vector<StateArchive::Run> whole_model_runs(std::int64_t numel);

}  // namespace hzp::schedulers
