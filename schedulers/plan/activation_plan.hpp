// The plan's activation estimate (docs/data-parallel.md "The plan"): a schedule's actions walked over the model's
// activation bytes per unit (ModelSpec::activation_bytes), as the step driver and a pipeline stage hold them.
// Private to hzp_schedulers.
#pragma once

#include <cstdint>
#include <vector>

#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::schedulers {

struct ActivationEstimate {
  /// What one micro-batch leaves held on the rank after all its forwards: every unit's kept bytes over the rank's
  /// chunks, and each chunk's received input (a stage that does not start the model).
  std::uint64_t per_micro_batch = 0;
  /// The highest level over the actions: the micro-batches in flight with the running unit's transients.
  std::uint64_t peak = 0;
  /// What `peak` leaves out on a stage that receives its input: each backward's input gradient stays held until the
  /// previous stage takes it (its send completes), which depends on the two stages' timing; at most every chunk's
  /// input gradient of the step, this many bytes. 0 on a stage that starts the model.
  std::uint64_t input_grads_waiting_at_most = 0;
};

/// Over `actions` in order: a forward adds its received input (first_unit > 0), then each unit's kept bytes,
/// reaching each unit's forward peak on the way; a backward reaches each unit's backward peak and returns its kept
/// bytes, and its input's gradient (the received input's size) is counted as freed when the action ends (the
/// stage frees it once its send completes).
ActivationEstimate estimate_activations(const workloads::ModelSpec& model, const workloads::TensorParallelRun& run,
                                        const std::vector<Action>& actions);

}  // namespace hzp::schedulers
