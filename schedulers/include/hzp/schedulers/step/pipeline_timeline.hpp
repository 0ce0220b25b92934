// The timeline a pipeline schedule implies when every action's time is known and messages are instant: each stage
// runs its action list (pipeline_schedule) in order, an action starting once its stage is free and its input is
// there (the previous chunk's forward of the same micro-batch; for a backward, the next chunk's backward, or its own
// forward on the last chunk). This is the schedule's own bubble, the reference the measured pipeline wait is
// compared with (scripts/pipeline_bubble.sh), and the closed forms (pp − 1)/(m + pp − 1) for GPipe and 1F1B and
// (pp − 1)/(v·m + pp − 1) for interleaved 1F1B are what it gives for equal chunks.
#pragma once

#include <vector>

#include "hzp/schedulers/step/pipeline_schedule.hpp"

namespace hzp::schedulers {

struct PipelineTimeline {
  double makespan = 0;             ///< the step's end: the last action's finish over every stage
  std::vector<double> busy;        ///< per stage: the sum of its actions' times
  int chunks = 0;                  ///< the layout's chunks (the stride of the two lists below)
  /// The finish of micro-batch mb's forward and backward on chunk k, at [mb · chunks + k]: when the message a
  /// stage sends after that action leaves (a phantom stage's modelled peers, docs/phantom.md).
  std::vector<double> forward_end, backward_end;
  /// Stage s's idle share of the step: 1 − busy[s] / makespan.
  double idle_fraction(int stage) const { return 1.0 - busy.at(static_cast<std::size_t>(stage)) / makespan; }
  double forward_end_of(int mb, int chunk) const { return forward_end.at(static_cast<std::size_t>(mb * chunks + chunk)); }
  double backward_end_of(int mb, int chunk) const {
    return backward_end.at(static_cast<std::size_t>(mb * chunks + chunk));
  }
};

/// Runs every stage's schedule of `kind` over `layout` and `micro_batches`, a forward of chunk k taking
/// forward_s[k] and a backward backward_s[k] (one entry per chunk, model order). PreconditionError when the lists
/// deadlock (they do not, for the schedules pipeline_schedule makes).
PipelineTimeline pipeline_timeline(PipelineScheduleKind kind, const PipelineLayout& layout, int micro_batches,
                                   const std::vector<double>& forward_s, const std::vector<double>& backward_s);

}  // namespace hzp::schedulers
