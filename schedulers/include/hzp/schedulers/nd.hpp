// `nd`: classic ND parallelism, Megatron-style (docs/nd-parallel.md). The model is split over a tensor-parallel
// group of scheduler.tp consecutive ranks (its pieces, and its own collectives, are the model's: the harness
// builds it with ProcessGroups::tensor()), cut into pipeline stages (scheduler.pp) and run on a context-parallel
// rank's share of every sequence (scheduler.cp, ring attention over ProcessGroups::context()); the data × context
// group (dp · cp ranks, each with its own tokens) replicates it with ddp's bucketed all-reduce, or shards its
// optimizer with the distributed optimizer (scheduler.distributed_optimizer: zero1's engine over that group).
#pragma once

#include <memory>

#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

/// nd's degrees at W ranks: tp = scheduler.tp, cp = scheduler.cp, pp = scheduler.pp, dp = W / (tp · cp · pp) as
/// dp_shard (distributed optimizer) or dp_replicate, tp_across_nodes from the options. ConfigError naming
/// scheduler.tp, scheduler.cp, scheduler.pp and W when their product does not divide W.
ParallelDims nd_parallel_dims(const SchedulerOptions& options, int world_size);

/// The registry's entry: ddp's engine (replicas) or zero1's (distributed optimizer) over nd's data-parallel group.
std::unique_ptr<Scheduler> make_nd_scheduler(const SchedulerArgs& args);

}  // namespace hzp::schedulers
