// estimate_activations (activation_plan.hpp).
#include "plan/activation_plan.hpp"

#include <algorithm>
#include <map>

#include "hzp/core/dtype.hpp"

namespace hzp::schedulers {

ActivationEstimate estimate_activations(const workloads::ModelSpec& model, const workloads::TensorParallelRun& run,
                                        const std::vector<Action>& actions) {
  const std::uint64_t input =
      static_cast<std::uint64_t>(model.boundary_elements(run.micro_batch_size, run.tp, run.sequence_parallel, run.cp)) *
      dtype_size(workloads::activation_dtype(run.precision));
  std::map<int, workloads::UnitActivationBytes> units;  // the rank's few units, each asked once
  auto bytes = [&](int u) -> const workloads::UnitActivationBytes& {
    auto it = units.find(u);
    if (it == units.end()) it = units.emplace(u, model.activation_bytes(u, run)).first;
    return it->second;
  };
  ActivationEstimate e;
  std::uint64_t held = 0;
  std::map<int, std::uint64_t> per_micro_batch;  // each micro-batch's, to report the first one's whole
  for (const Action& a : actions) {
    std::uint64_t& mine = per_micro_batch[a.micro_batch];
    if (a.kind == Action::Kind::forward) {
      if (a.first_unit > 0) {
        held += input;
        mine += input;
      }
      for (int u = a.first_unit; u < a.end_unit; ++u) {
        e.peak = std::max(e.peak, held + bytes(u).forward_peak);
        held += bytes(u).kept;
        mine += bytes(u).kept;
      }
      e.per_micro_batch = std::max(e.per_micro_batch, mine);
    } else {
      for (int u = a.end_unit - 1; u >= a.first_unit; --u) {
        e.peak = std::max(e.peak, held + bytes(u).backward_peak);
        held -= bytes(u).kept;
        mine -= bytes(u).kept;
      }
      if (a.first_unit > 0) {
        held -= input;
        mine -= input;
        e.input_grads_waiting_at_most += input;
      }
    }
  }
  return e;
}

}  // namespace hzp::schedulers
