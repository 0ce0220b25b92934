// The absent peer stages of a phantom pipeline rank (docs/phantom.md, "Pipeline stages"). A phantom world has no
// other stage to send this stage its inputs, so when each message would arrive is modelled: every stage runs the
// same schedule (pipeline_timeline over every stage's action list), starting when this stage starts its step, and
// every chunk's forward and backward of a micro-batch takes this rank's own measured time of its chunk at the same
// position (chunk k: this stage's chunk k / pp). A receive completes no earlier than the modelled end of the peer
// action that sends it, so a phantom stage waits where a real stage waits: the pipeline's bubble.
#pragma once

#include <optional>
#include <vector>

#include "hzp/schedulers/step/pipeline_timeline.hpp"

namespace hzp::schedulers {

class PhantomPeerStages {
 public:
  PhantomPeerStages(PipelineScheduleKind kind, const PipelineLayout& layout, int stage);

  /// A step's schedule over `micro_batches` starts at wall time `start_s`. The last step's mean times become the
  /// estimates of this one; in the first step, this step's means so far (zero before a chunk's first action).
  void begin(double start_s, int micro_batches);
  /// This rank's own time of action `a` (its units' compute and whatever the parameter engine held it for; the
  /// pipeline's waits excluded).
  void measured(const Action& a, double seconds);
  /// The wall time the peer's message holding `a`'s input leaves: for a forward, the end of the same micro-batch's
  /// forward on the chunk before; for a backward, the end of its backward on the chunk after.
  double input_sent_at(const Action& a);
  /// The wall time the last stage's schedule ends: where the stages meet (the step's sum of the losses).
  double end_at();

 private:
  struct Mean {
    double sum = 0;
    int n = 0;
    double value() const { return n > 0 ? sum / n : 0.0; }
  };
  const PipelineTimeline& timeline();

  PipelineScheduleKind kind_;
  PipelineLayout layout_;
  int stage_;
  int micro_batches_ = 0;
  double start_s_ = 0;
  // Per chunk position c (0 <= c < v) of this stage: index 2c forward, 2c + 1 backward.
  std::vector<Mean> now_, last_;
  std::optional<PipelineTimeline> timeline_;  // reset when an estimate changes
};

}  // namespace hzp::schedulers
