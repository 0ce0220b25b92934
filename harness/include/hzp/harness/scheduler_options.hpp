// The `scheduler.*` keys as the typed schedulers::SchedulerOptions (declared once, in
// hzp/schedulers/scheduler_options.hpp), and the plan inputs of a resolved configuration: what `hzpbench
// plan` prints and what the run loop hands to the scheduler it builds.
#pragma once

#include "hzp/core/options.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::harness {

/// Every declared scheduler.* key read into its field (schedulers::scheduler_options_from).
schedulers::SchedulerOptions scheduler_options_from(const ResolvedConfig& config);

/// Plan inputs for `layout` (of `model`, which must outlive them) from the configuration: train.*, scheduler.*, topology.world_size (> 0
/// required: planning runs without MPI), topology.ranks_per_node, collectives.small_message_bytes and
/// `rank`. ConfigError naming the key when the world size is 0.
schedulers::PlanInputs plan_inputs_from(const ResolvedConfig& config, const workloads::ModelSpec& model,
                                        const workloads::ParamLayout& layout, int rank);

}  // namespace hzp::harness
