// none's declaration for the plan (plan/engine_plans.hpp): the single-rank reference keeps every component
// whole and issues no collective.
#include "hzp/core/error.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {
namespace {

class NonePlan final : public EnginePlan {
 public:
  explicit NonePlan(const PlanInputs& in) {
    if (in.world_size != 1)
      HZP_THROW(ConfigError, "scheduler none is the single-rank reference and runs on 1 rank, not topology.world_size = ",
                in.world_size, "; plan it with --set topology.world_size=1");
    const auto n = static_cast<std::uint64_t>(in.layout->total_numel());
    const bool mixed = workloads::has_separate_master(in.train.precision);
    micro_batches_per_rank = in.train.micro_batches();
    // Deterministic mode: the fp32 micro-batch gradient (also the step's converted sum) and the int64 sum.
    state_bytes = {n * dtype_size(workloads::param_dtype(in.train.precision)), n * (in.train.deterministic ? 12 : 4),
                   mixed ? n * 4 : 0, n * 4, n * 4};
  }
  void unit(const Action&, int, int, CollectiveLedger&) override {}
  void step_end(CollectiveLedger&) const override {}
};

}  // namespace

std::unique_ptr<EnginePlan> plan_none_engine(const PlanInputs& in) { return std::make_unique<NonePlan>(in); }

}  // namespace hzp::schedulers
