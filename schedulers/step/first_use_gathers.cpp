// FirstUseGathers (step/first_use_gathers.hpp): held blocks across a schedule's unit calls.
#include "hzp/schedulers/step/first_use_gathers.hpp"

namespace hzp::schedulers {

FirstUseGathers::FirstUseGathers(const workloads::ParamLayout& layout)
    : layout_(&layout), held_(static_cast<std::size_t>(layout.num_units()), false) {}

std::vector<int> FirstUseGathers::call(const Action& a, int u) { return visit(a, u).gather; }

FirstUseGathers::Call FirstUseGathers::visit(const Action& a, int u, const std::function<bool(int)>& keep) {
  Call c;
  for (int b : layout_->param_blocks(u))
    if (!held_[static_cast<std::size_t>(b)]) {
      c.gather.push_back(b);
      held_[static_cast<std::size_t>(b)] = true;
    }
  const bool forward = a.kind == Action::Kind::forward;
  for (int b : forward ? layout_->params_last_used_in_forward(u) : layout_->grads_final_after(u))
    if (held_[static_cast<std::size_t>(b)] && !(keep && keep(b))) {
      held_[static_cast<std::size_t>(b)] = false;
      c.release.push_back(b);
    }
  return c;
}

}  // namespace hzp::schedulers
