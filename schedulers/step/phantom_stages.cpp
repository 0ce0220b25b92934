// PhantomPeerStages (phantom_stages.hpp): this stage's measured action times, every stage's schedule run on them.
#include "hzp/schedulers/step/phantom_stages.hpp"

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

PhantomPeerStages::PhantomPeerStages(PipelineScheduleKind kind, const PipelineLayout& layout, int stage)
    : kind_(kind), layout_(layout), stage_(stage), now_(static_cast<std::size_t>(2 * layout.v)),
      last_(now_.size()) {
  HZP_CHECK(stage >= 0 && stage < layout.pp, "phantom peer stages: stage ", stage, " of ", layout.pp);
}

void PhantomPeerStages::begin(double start_s, int micro_batches) {
  // A step that measured every position replaces the estimates; a partial one (an attempt cut short) does not.
  bool complete = true;
  for (const Mean& m : now_) complete = complete && m.n > 0;
  if (complete) last_ = now_;
  now_.assign(now_.size(), Mean{});
  start_s_ = start_s;
  micro_batches_ = micro_batches;
  timeline_.reset();
}

void PhantomPeerStages::measured(const Action& a, double seconds) {
  const int position = layout_.chunk_at(a) / layout_.pp;
  Mean& m = now_.at(static_cast<std::size_t>(2 * position + (a.kind == Action::Kind::forward ? 0 : 1)));
  m.sum += seconds;
  ++m.n;
  // Only the first step's estimates move with it; later steps run on the last step's.
  if (last_.front().n == 0) timeline_.reset();
}

const PipelineTimeline& PhantomPeerStages::timeline() {
  if (!timeline_) {
    const std::vector<Mean>& est = last_.front().n > 0 ? last_ : now_;
    std::vector<double> fwd(static_cast<std::size_t>(layout_.chunks())), bwd(fwd.size());
    for (int k = 0; k < layout_.chunks(); ++k) {
      const auto position = static_cast<std::size_t>(k / layout_.pp);
      fwd[static_cast<std::size_t>(k)] = est[2 * position].value();
      bwd[static_cast<std::size_t>(k)] = est[2 * position + 1].value();
    }
    timeline_ = pipeline_timeline(kind_, layout_, micro_batches_, fwd, bwd);
  }
  return *timeline_;
}

double PhantomPeerStages::input_sent_at(const Action& a) {
  const int k = layout_.chunk_at(a);
  const bool forward = a.kind == Action::Kind::forward;
  HZP_CHECK(forward ? k > 0 : k < layout_.chunks() - 1, "phantom peer stages: ", to_string(a),
            " takes no input from another stage");
  const PipelineTimeline& t = timeline();
  return start_s_ + (forward ? t.forward_end_of(a.micro_batch, k - 1) : t.backward_end_of(a.micro_batch, k + 1));
}

double PhantomPeerStages::end_at() { return start_s_ + timeline().makespan; }

}  // namespace hzp::schedulers
