// StageReuse (step/stage_reuse.hpp): parameter reuse and gradient merging across a stage's neighbouring actions.
#include "hzp/schedulers/step/stage_reuse.hpp"

#include <algorithm>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

StageReuse::StageReuse(const workloads::ParamLayout& layout, const std::vector<Action>& actions, bool reuse_params,
                       bool merge_grads)
    : layout_(&layout), reuse_params_(reuse_params), merge_grads_(merge_grads), gathers_(layout) {
  const auto blocks = static_cast<std::size_t>(layout.num_units());
  param_uses_.resize(blocks);
  grad_finals_.resize(blocks);
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[static_cast<std::size_t>(i)];
    index_[{static_cast<int>(a.kind), a.micro_batch, a.first_unit}] = i;
    for (int u = a.first_unit; u < a.end_unit; ++u) {
      for (int b : layout.param_blocks(u)) {
        auto& uses = param_uses_[static_cast<std::size_t>(b)];
        if (uses.empty() || uses.back() != i) uses.push_back(i);
      }
      if (a.kind == Action::Kind::backward)
        for (int b : layout.grads_final_after(u)) grad_finals_[static_cast<std::size_t>(b)].push_back(i);
    }
  }
}

int StageReuse::index_of(const Action& a) const {
  const auto it = index_.find({static_cast<int>(a.kind), a.micro_batch, a.first_unit});
  HZP_CHECK(it != index_.end(), "StageReuse: ", to_string(a), " is not in the schedule");
  return it->second;
}

int StageReuse::next_after(const std::vector<int>& uses, int i) {
  const auto it = std::upper_bound(uses.begin(), uses.end(), i);
  return it == uses.end() ? -1 : *it;
}

int StageReuse::prev_before(const std::vector<int>& uses, int i) {
  const auto it = std::lower_bound(uses.begin(), uses.end(), i);
  return it == uses.begin() ? -1 : *(it - 1);
}

FirstUseGathers::Call StageReuse::call(const Action& a, int u) {
  if (!reuse_params_) return gathers_.visit(a, u);
  const int i = index_of(a);
  // Held across at most one other action (i + 1: the very next one; i + 2: one in between).
  return gathers_.visit(a, u, [&](int b) {
    const int next = next_after(param_uses_[static_cast<std::size_t>(b)], i);
    return next >= 0 && next - i <= 2;
  });
}

bool StageReuse::grad_held_after(const Action& a, int b) const {
  if (!merge_grads_) return false;
  const int i = index_of(a);
  return next_after(grad_finals_[static_cast<std::size_t>(b)], i) == i + 1;
}

bool StageReuse::grad_continues(const Action& a, int b) const {
  if (!merge_grads_) return false;
  const int i = index_of(a);
  const int prev = prev_before(grad_finals_[static_cast<std::size_t>(b)], i);
  return prev >= 0 && prev == i - 1;
}

}  // namespace hzp::schedulers
