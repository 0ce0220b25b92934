// The order of a pipeline's boundary messages on each link. NCCL has no tags: a send and a receive between two
// ranks match by the order they were posted on one communicator. A pipeline stage on a CUDA stream gives every
// directed link (activations into stage t, gradients into stage t) its own communicator (pipeline_links.hpp), so
// its runs are correct only if, on every link, the sender posts its sends in the order the receiver posts its
// receives. This checks that for a whole pipeline's schedules; the MPI backend matches by tag and needs no such
// agreement.
#pragma once

#include <vector>

#include "hzp/schedulers/step/pipeline_schedule.hpp"

namespace hzp::schedulers {

/// PreconditionError naming the link (activations or gradients into a stage), the position and the two
/// (micro-batch, chunk) messages that differ, unless for every link of `layout` the sending stage's sends and the
/// receiving stage's receives, taken in the order of `stage_actions[s]` (stage s's schedule), list the same
/// messages in the same order.
void check_boundary_order(const PipelineLayout& layout, const std::vector<std::vector<Action>>& stage_actions);

}  // namespace hzp::schedulers
