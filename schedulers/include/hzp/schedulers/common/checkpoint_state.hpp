// The parts of a checkpoint every scheduler shares (docs/checkpoints.md): the state beside the optimizer's arrays
// (deterministic mode's scales, the model's non-gradient state such as the MoE balancing bias), the whole-model
// run of a replicated scheduler, and a device buffer's arrays staged through the host.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "hzp/core/device.hpp"
#include "hzp/core/stream.hpp"
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

/// StateArchive::array for a buffer of `numel` elements of `dtype` at `base` on `device`: directly on the host; a
/// CUDA buffer through a host copy of the whole buffer (saving: copied down, then archived; loading: copied down,
/// the runs read into it, copied back up, so elements outside the runs keep their values). Enqueues on `stream`
/// (the buffer's) and blocks the host until the copies are done. Collective as StateArchive::array.
void device_array(StateArchive& archive, std::string_view component, DType dtype, std::span<const StateArchive::Run> runs,
                  void* base, std::int64_t numel, Device device, StreamRef stream);

/// The one run of a whole, unpadded flat buffer of `numel` elements.
std::vector<StateArchive::Run> whole_model_runs(std::int64_t numel);

}  // namespace hzp::schedulers
