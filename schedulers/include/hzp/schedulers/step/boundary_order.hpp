// The order of a pipeline's boundary messages on each link. NCCL has no tags: a send and a receive between two
// ranks match by the order they were posted on one communicator. A pipeline stage on a CUDA stream gives every
// directed link (activations into stage t, gradients into stage t) its own communicator (pipeline_links.hpp), so
// its runs are correct only if, on every link, the sender posts its sends in the order the receiver posts its
// receives. This checks that for a whole pipeline's schedules; the MPI backend matches by tag and needs no such
// agreement. On a device a stage posts each receive an action ahead of the action that consumes it (receive_posts),
// so the order that counts at the receiving end is the order of those posts, and that is what is checked.
#pragma once

#include <cstddef>
#include <vector>

#include "hzp/schedulers/step/pipeline_schedule.hpp"

namespace hzp::schedulers {

/// Where a stage on a device posts one receive: right before action `at`'s kernels are enqueued, for action
/// `consumer` (at <= consumer), an activation (`gradient` false) or an output's gradient.
struct ReceivePost {
  std::size_t at = 0;
  std::size_t consumer = 0;
  bool gradient = false;
  bool operator==(const ReceivePost&) const = default;
};

/// Every receive of `actions` (a stage's schedule of `layout`) in the order the stage posts them: each one action
/// ahead of its consumer (so its transfer overlaps that action's compute), but an output's gradient not before the
/// action after the forward that made the output (its slot is taken from the context that forward filled). Ordered
/// by `at`, then by consumer, so on each link the posts come in the consumers' order.
std::vector<ReceivePost> receive_posts(const PipelineLayout& layout, const std::vector<Action>& actions);

/// PreconditionError naming the link (activations or gradients into a stage), the position and the two
/// (micro-batch, chunk) messages that differ, unless for every link of `layout` the sending stage's sends and the
/// receiving stage's receives, taken in the order of `stage_actions[s]` (stage s's schedule), list the same
/// messages in the same order.
/// The receives are taken in the order receive_posts lists them.
void check_boundary_order(const PipelineLayout& layout, const std::vector<std::vector<Action>>& stage_actions);
/// The same with the receives taken in the order `stage_posts[s]` lists them (every receive of stage s's schedule
/// exactly once, each posted no later than its consumer; PreconditionError naming the stage otherwise).
void check_boundary_order(const PipelineLayout& layout, const std::vector<std::vector<Action>>& stage_actions,
                          const std::vector<std::vector<ReceivePost>>& stage_posts);

}  // namespace hzp::schedulers
