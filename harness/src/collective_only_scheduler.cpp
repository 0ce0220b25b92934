// The collective-only stand-in scheduler (collective_only_scheduler.hpp).
#include "collective_only_scheduler.hpp"

#include <cmath>
#include <vector>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/workloads/batch_plan.hpp"

namespace hzp::harness {
namespace {

class CollectiveOnlyScheduler final : public schedulers::Scheduler {
 public:
  explicit CollectiveOnlyScheduler(const schedulers::SchedulerArgs& a)
      : model_(a.model), train_(a.train), world_(a.world),
        plan_(a.train.global_batch, a.train.micro_batch_size, a.world != nullptr ? a.world->size() : 1) {
    HZP_CHECK(model_ != nullptr && world_ != nullptr, "debug.collective_only needs a model and a world communicator");
    // A gradient-bucket-like message: big enough to cross the small-message threshold, small enough for CI.
    staging_.assign(16384, 1.0f);
  }

  std::string_view name() const override { return "debug.collective_only"; }

  schedulers::StepStats step(const schedulers::StepBatch& batch) override {
    HZP_CHECK(batch.step == next_step_, "steps run in order; expected ", next_step_, ", got ", batch.step);
    const Stopwatch whole;
    for (std::int64_t i = 0; i < plan_.micro_batches_per_rank(); ++i) {
      {
        // A token of work per micro-batch, so that the compute part of the closure is not empty.
        const profile::ScopedPhase phase(profile::Phase::forward, "collective_only");
        for (float& x : staging_) x = 1.0f;
      }
      world_->all_reduce(TensorView(staging_.data(), Shape{static_cast<std::int64_t>(staging_.size())}, DType::f32),
                         coll::ReduceOp::sum, StreamRef::host());
    }
    ++next_step_;
    schedulers::StepStats st;
    st.step = batch.step;
    // A smooth, deterministic curve from ln(V) towards ln(V)/2: something to plot, nothing learned.
    const double lnv = std::log(static_cast<double>(model_->vocab()));
    st.loss = lnv * (0.5 + 0.5 * std::exp(-static_cast<double>(batch.step) / 50.0));
    st.grad_norm = 1.0;
    st.lr = train_.lr;
    st.tokens = train_.global_batch * model_->seq_len();
    st.seconds = whole.wall();
    return st;
  }

 private:
  const workloads::Workload* model_;
  workloads::TrainConfig train_;
  coll::Communicator* world_;
  workloads::BatchPlan plan_;
  std::vector<float> staging_;
  std::int64_t next_step_ = 0;
};

}  // namespace

std::unique_ptr<schedulers::Scheduler> make_collective_only_scheduler(const schedulers::SchedulerArgs& args) {
  return std::make_unique<CollectiveOnlyScheduler>(args);
}

}  // namespace hzp::harness
