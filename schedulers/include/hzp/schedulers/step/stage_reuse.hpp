// What neighbouring actions of a pipeline stage's schedule share under asynchzp (AsyncHZP, arXiv 2510.20111
// §4.3; docs/data-parallel.md "Pipeline stages under asynchzp"):
//  - parameter reuse (scheduler.pp_reuse): a gathered block is held from one action to the stage's next use of
//    it when at most one other action runs in between. Consecutive micro-batches of the same (virtual) stage
//    in warm-up and cool-down share one all-gather, and in the steady state a forward reuses the parameters the
//    previous forward gathered, kept across the one backward between them. With one chunk per stage every
//    action uses the stage's units, so each block is gathered once per step and the stage's parameters stay
//    whole through it: the memory this costs.
//  - gradient merging (scheduler.rs_merge): a block's gradient finalised by a backward is kept, not
//    reduce-scattered, when the stage's next action is another backward that finalises it (the cool-down's
//    runs of backwards): the run's micro-batches are summed in the full block and reduce-scattered once.
// Both are for pipeline schedules: the engine turns them on only when pp > 1.
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "hzp/schedulers/step/first_use_gathers.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

class StageReuse {
 public:
  StageReuse(const workloads::ParamLayout& layout, const std::vector<Action>& actions, bool reuse_params,
             bool merge_grads);

  /// The call on unit u in action a, made in for_each_unit_call order: the blocks to gather before it and
  /// the blocks to free after it.
  FirstUseGathers::Call call(const Action& a, int u);
  /// Backward `a` finalised block b's gradient: true when it stays in the full block for the next action's
  /// backward (no reduce-scatter now).
  bool grad_held_after(const Action& a, int b) const;
  /// Backward `a` adds to the gradient block b that the previous action kept (its first writer accumulates).
  bool grad_continues(const Action& a, int b) const;
  /// The position of `a` in the schedule (PreconditionError when it is not there).
  int index_of(const Action& a) const;

 private:
  // Next action after `i` that uses (params) / finalises (grads) block b; -1 when none.
  static int next_after(const std::vector<int>& uses, int i);
  static int prev_before(const std::vector<int>& uses, int i);

  const workloads::ParamLayout* layout_;
  bool reuse_params_, merge_grads_;
  FirstUseGathers gathers_;
  std::map<std::tuple<int, int, int>, int> index_;  // (kind, micro-batch, first unit) -> position
  std::vector<std::vector<int>> param_uses_;        // per block: the actions whose units read it, in order
  std::vector<std::vector<int>> grad_finals_;       // per block: the backwards that finalise its gradient
};

}  // namespace hzp::schedulers
