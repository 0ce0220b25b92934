// Pieces every data-parallel step needs that are not communication patterns: validating W against the
// micro-batch count and a group size (messages naming every value), this rank's micro-batches, and the
// global loss (local micro-batch losses summed, then all-reduced in fp64).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

/// ConfigError naming scheduler, world size, group size, train.global_batch, train.micro_batch_size and
/// the micro-batch count, listing every problem: W < 1; group_size not dividing W (when group_size > 0);
/// micro-batches per step not a multiple of dp = W. Also validates train and the model's precision.
void validate_data_parallel(std::string_view scheduler, const SchedulerArgs& args, int group_size);

/// Sum of `local` over `comm` (fp64, blocking): the global mean loss when each rank passes the sum of its
/// micro-batches' loss() values.
double all_reduce_sum(coll::Communicator& comm, double local);

/// The StepStats every data-parallel step reports: the global loss (all_reduce_sum of `local_loss` over
/// `scalars`), the optimizer's norm/clip/lr, the global batch's tokens and the given timings.
StepStats data_parallel_step_stats(std::int64_t step, coll::Communicator& scalars, double local_loss,
                                   const OptimizerStepResult& r, std::int64_t tokens, double compute_seconds,
                                   double optimizer_seconds, double seconds);

/// The contiguous group (size z) and the strided replica group (stride z) holding world rank `rank`.
std::vector<int> contiguous_group_of(int world, int z, int rank);
std::vector<int> strided_group_of(int world, int z, int rank);

}  // namespace hzp::schedulers
