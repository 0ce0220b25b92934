// `hzpbench simulate` with document packing (docs/simulate.md "Document packing"): the ranks no longer compute
// alike, so every rank is simulated together with every rank its collectives couple (the connected sets of the
// step descriptions' group members), each with its own micro-batches' attention factors (packing_imbalance.hpp);
// the descriptions are held once per role (role_descriptions.hpp).
#pragma once

#include <functional>
#include <vector>

#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/plan.hpp"
#include "run_setup.hpp"

namespace hzp::harness {

/// What the join sets' simulation reports besides the steps: how many sets and the largest, and the roles whose
/// descriptions the ranks shared.
struct JoinSets {
  std::vector<SimulatedStep> steps;  ///< by world rank
  int sets = 0, largest = 0, roles = 0;
};

/// Every rank of `world` simulated in its join set (simulate_joined) with its attention factors for step 0 of
/// s.data.packing; `describe(r)` is rank r's step description, `options` the scheduler's (for the rank's rows);
/// `times` with the attention share of the transformer blocks only (block_attention_shares).
JoinSets simulate_packed(const RunSetup& s, const schedulers::SchedulerOptions& options, int world,
                         const std::function<schedulers::StepDescription(int)>& describe, const UnitTimes& times,
                         const SimulatorLinks& links);

}  // namespace hzp::harness
