// Which parameter blocks an engine that gathers on first use must gather before each unit call of a
// schedule. A block is gathered when a call needs it and is not held, and held until its last use in a
// forward (ParamLayout::params_last_used_in_forward) or until its gradient is final (grads_final_after);
// what is held carries over from one action to the next. asynchzp's background thread orders its gathers
// by it (gather_order) and the plan counts zero3's, hsdp's and asynchzp's gathers with it, so both follow
// whatever schedule the driver runs.
#pragma once

#include <functional>
#include <vector>

#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

class FirstUseGathers {
 public:
  explicit FirstUseGathers(const workloads::ParamLayout& layout);
  /// The call on unit `u` in action `a` (calls in the order the driver makes them): the blocks to gather
  /// before it, in param_blocks order; then drops what the call was the last use of.
  std::vector<int> call(const Action& a, int u);
  /// What call() decides, with the blocks it stops holding: those the call was the last use of, except where
  /// `keep(b)` says to hold b on (the engine's reuse across neighbouring actions; StageReuse).
  struct Call {
    std::vector<int> gather, release;
  };
  Call visit(const Action& a, int u, const std::function<bool(int)>& keep = {});

 private:
  const workloads::ParamLayout* layout_;
  std::vector<bool> held_;
};

}  // namespace hzp::schedulers
