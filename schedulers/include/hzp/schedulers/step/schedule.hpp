// A schedule: the list of actions one rank runs in a step, in order. An action is the forward or the
// backward of a contiguous unit range for one of the rank's micro-batches. The step driver executes the
// list; a parameter engine answers each action's requests for parameters and gradients. Pipeline schedules
// (GPipe, 1F1B, interleaved) are further lists of the same actions, with sends and receives between stages.
#pragma once

#include <string>
#include <vector>

namespace hzp::schedulers {

struct Action {
  enum class Kind { forward, backward };
  Kind kind = Kind::forward;
  int micro_batch = 0;  ///< the rank's local micro-batch index (0-based, in its BatchPlan order)
  int first_unit = 0;   ///< the unit range [first_unit, end_unit); forward runs it upwards, backward downwards
  int end_unit = 0;

  bool operator==(const Action&) const = default;
};

/// "F2[0,5)" / "B2[0,5)": for messages and tests.
std::string to_string(const Action& a);

/// Calls fn(action, unit) for every unit call of `actions`, in the order the step driver makes them: a
/// forward's units upwards, a backward's downwards. The driver, the plan and asynchzp's gather order all walk a
/// schedule through this, so they agree on the order by construction.
template <typename Fn>
void for_each_unit_call(const std::vector<Action>& actions, Fn&& fn) {
  for (const Action& a : actions) {
    if (a.kind == Action::Kind::forward)
      for (int u = a.first_unit; u < a.end_unit; ++u) fn(a, u);
    else
      for (int u = a.end_unit - 1; u >= a.first_unit; --u) fn(a, u);
  }
}

/// Today's order, the one every data-parallel scheduler runs: for each of the rank's micro-batches in order,
/// the forward of every unit, then the backward of every unit.
std::vector<Action> sequential_schedule(int micro_batches, int units);

/// PreconditionError unless `actions` is a valid whole-model schedule for `micro_batches` micro-batches of
/// `units` units: each micro-batch's forward covers 0..units-1 in order, its backward follows its forward and
/// covers units-1..0 in order, and ranges are non-empty and inside [0, units).
void check_schedule(const std::vector<Action>& actions, int micro_batches, int units);

}  // namespace hzp::schedulers
