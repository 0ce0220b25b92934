// One description per role of a world (role_descriptions.hpp): each rank is described, keyed as the fold keys a rank
// alone, and kept as its role's description and its own groups in the role's slots.
#include "hzp/harness/role_descriptions.hpp"

#include <algorithm>

#include "hzp/harness/step_fold.hpp"

namespace hzp::harness {

std::unique_ptr<RoleDescriptions::Role> RoleDescriptions::make_role(schedulers::StepDescription d) {
  auto role = std::make_unique<Role>();
  role->description = std::move(d);
  const schedulers::StepDescription& rd = role->description;
  std::vector<const schedulers::GroupMembers*> slots;  // the description's distinct groups, by first event
  for (std::size_t i = 0; i < rd.events.size(); ++i) {
    const schedulers::GroupMembers& m = rd.events[i].members;
    auto it = std::find_if(slots.begin(), slots.end(), [&](const auto* s) { return s->same(m); });
    if (it == slots.end()) it = std::find_if(slots.begin(), slots.end(), [&](const auto* s) { return *s == m; });
    if (it == slots.end()) {
      it = slots.insert(slots.end(), &m);
      role->first_event.push_back(static_cast<int>(i));
      const auto at = std::find(m.begin(), m.end(), rd.plan.rank);
      role->groups.position.push_back(at == m.end() ? -1 : static_cast<int>(at - m.begin()));
    }
    role->groups.slot.push_back(static_cast<int>(it - slots.begin()));
  }
  return role;
}

bool RoleDescriptions::own_groups(const Role& role, const schedulers::StepDescription& d, RankGroups& out) {
  out.rank = d.plan.rank;
  out.role = &role.groups;
  out.members.clear();
  for (const int e : role.first_event) out.members.push_back(d.events[static_cast<std::size_t>(e)].members);
  for (std::size_t i = 0; i < d.events.size(); ++i)
    if (!(d.events[i].members == out.members[static_cast<std::size_t>(role.groups.slot[i])])) return false;
  return true;
}

RoleDescriptions::RoleDescriptions(int world, const std::function<schedulers::StepDescription(int)>& describe,
                                   int ranks_per_node,
                                   const std::function<void(const schedulers::StepDescription&)>& visit) {
  RoleKeys keys(ranks_per_node);
  std::unordered_map<std::string, int> by_key;  // -> index in roles_
  ranks_.resize(static_cast<std::size_t>(world));
  role_of_.resize(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    schedulers::StepDescription d = describe(r);
    if (visit) visit(d);
    RankGroups& own = ranks_[static_cast<std::size_t>(r)];
    int& role = role_of_[static_cast<std::size_t>(r)];
    auto [it, fresh] = by_key.try_emplace(keys.key({&d}), static_cast<int>(roles_.size()));
    role = it->second;
    // A rank whose groups the role's slots cannot hold (two of its groups where the role has one) is a role alone.
    if (!fresh && own_groups(*roles_[static_cast<std::size_t>(role)], d, own)) continue;
    role = static_cast<int>(roles_.size());
    roles_.push_back(make_role(std::move(d)));
    own_groups(*roles_.back(), roles_.back()->description, own);
  }
}

SimulatedRank RoleDescriptions::rank(int r, std::vector<double> factors) const {
  const Role& role = *roles_[static_cast<std::size_t>(role_of_.at(static_cast<std::size_t>(r)))];
  return {&role.description, std::move(factors), &ranks_[static_cast<std::size_t>(r)]};
}

}  // namespace hzp::harness
