// ContextParallelPlan and model_run (context_parallel_plan.hpp).
#include "plan/context_parallel_plan.hpp"

#include "hzp/core/error.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/context_parallel.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::schedulers {

workloads::TensorParallelRun model_run(const PlanInputs& in, const ParallelDims& dims) {
  workloads::TensorParallelRun run;
  run.tp = dims.tp;
  run.cp = dims.cp;
  run.sequence_parallel = in.options.sequence_parallel;
  run.recompute = in.train.recompute;
  run.micro_batch_size = in.train.micro_batch_size;
  run.precision = in.train.precision;
  return run;
}

ContextParallelPlan::ContextParallelPlan(const PlanInputs& in, const ParallelDims& dims, const coll::RankMesh& mesh)
    : cp_(dims.cp), run_(model_run(in, dims)), spec_(in.model) {
  if (cp_ == 1) return;
  if (in.model == nullptr)
    HZP_THROW(ConfigError, "the plan at scheduler.cp = ", cp_, " needs the model (its ring attention's messages), "
              "not only its layout");
  (void)workloads::ContextShard(in.model->seq_len(), cp_, 0);  // ConfigError unless 2·cp divides seq_len
  group_ = {"cp", plan_mesh_group(in, mesh, kAxisContext)};
  rank_ = mesh.position(kAxisContext, in.rank);
}

void ContextParallelPlan::unit(const Action& a, int u, CollectiveLedger& out) const {
  if (!active()) return;
  const bool bwd = a.kind == Action::Kind::backward;
  const workloads::RingAttentionMessages m = spec_->context_parallel_messages(u, bwd, run_);
  if (m.sends == 0) return;
  const int prev = (rank_ + cp_ - 1) % cp_, next = (rank_ + 1) % cp_;
  const char* what = bwd ? (run_.recompute ? "per micro-batch (ring attention: recomputed K, V, then K, V, dK, dV)"
                                           : "per micro-batch (ring attention: K, V, dK, dV)")
                         : "per micro-batch (ring attention: K, V)";
  // RingAttention's order: K and V posted before a step's block, overlapping it; backward's dK and dV sent after
  // the block; every step waits for its messages before the next (the simulator's `ring` stream).
  const auto steps = static_cast<int>(m.steps);
  out.stream(CommStream::ring, CommPlace::before_unit);
  out.ring(static_cast<int>(m.posted_before / 2), steps);
  out.send(group_, next, m.elements, m.dtype, m.posted_before, what);
  if (m.sends > m.posted_before) {
    out.stream(CommStream::ring, CommPlace::after_unit);
    out.ring(static_cast<int>((m.sends - m.posted_before) / 2), steps);
    out.send(group_, next, m.elements, m.dtype, m.sends - m.posted_before, what);
  }
  out.recv(group_, prev, m.elements, m.dtype, m.sends, what);
  out.stream(CommStream::compute);
}

void ContextParallelPlan::step_end(std::int64_t micro_batches_per_rank, CollectiveLedger& out) const {
  if (active())
    StepDriver::plan_context_collectives(group_, micro_batches_per_rank, spec_ ? spec_->step_statistics() : 0, out);
}

}  // namespace hzp::schedulers
