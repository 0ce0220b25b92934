// The sequential schedule and the check of a whole-model schedule (schedule.hpp).
#include "hzp/schedulers/step/schedule.hpp"

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

std::string to_string(const Action& a) {
  return std::string(a.kind == Action::Kind::forward ? "F" : "B") + std::to_string(a.micro_batch) + "[" +
         std::to_string(a.first_unit) + "," + std::to_string(a.end_unit) + ")";
}

std::vector<Action> sequential_schedule(int micro_batches, int units) {
  std::vector<Action> out;
  out.reserve(static_cast<std::size_t>(2 * micro_batches));
  for (int i = 0; i < micro_batches; ++i) {
    out.push_back({Action::Kind::forward, i, 0, units});
    out.push_back({Action::Kind::backward, i, 0, units});
  }
  return out;
}

void check_schedule(const std::vector<Action>& actions, int micro_batches, int units) {
  // Per micro-batch: the next unit its forward must start at, and the unit its backward must end at.
  std::vector<int> fwd_next(static_cast<std::size_t>(micro_batches), 0), bwd_end(static_cast<std::size_t>(micro_batches), units);
  for (const Action& a : actions) {
    HZP_CHECK(a.micro_batch >= 0 && a.micro_batch < micro_batches, "schedule: ", to_string(a), " names micro-batch ",
              a.micro_batch, " of ", micro_batches);
    HZP_CHECK(a.first_unit >= 0 && a.first_unit < a.end_unit && a.end_unit <= units, "schedule: ", to_string(a),
              " is not a non-empty range of units 0..", units - 1);
    const auto i = static_cast<std::size_t>(a.micro_batch);
    if (a.kind == Action::Kind::forward) {
      HZP_CHECK(a.first_unit == fwd_next[i], "schedule: ", to_string(a), " starts at unit ", a.first_unit,
                "; micro-batch ", a.micro_batch, "'s forward is at unit ", fwd_next[i]);
      fwd_next[i] = a.end_unit;
    } else {
      HZP_CHECK(fwd_next[i] == units, "schedule: ", to_string(a), " runs before micro-batch ", a.micro_batch,
                "'s forward finished");
      HZP_CHECK(a.end_unit == bwd_end[i], "schedule: ", to_string(a), " ends at unit ", a.end_unit, "; micro-batch ",
                a.micro_batch, "'s backward is at unit ", bwd_end[i] - 1);
      bwd_end[i] = a.first_unit;
    }
  }
  for (int i = 0; i < micro_batches; ++i)
    HZP_CHECK(fwd_next[static_cast<std::size_t>(i)] == units && bwd_end[static_cast<std::size_t>(i)] == 0,
              "schedule: micro-batch ", i, " is not run through every unit forward and backward");
}

}  // namespace hzp::schedulers
