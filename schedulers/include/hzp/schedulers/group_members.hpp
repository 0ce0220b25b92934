// GroupMembers: a group's world ranks in position order, immutable and shared. A plan's groups are named once
// per rank but declared in many calls, and `hzpbench simulate` holds every call of every rank at once: a replica
// group of thousands of ranks copied into each call made describing a world quadratic in its size (docs/simulate.md
// "Scale"). Copies share one vector; reads look like a const std::vector<int>.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace hzp::schedulers {

class GroupMembers {
 public:
  GroupMembers() = default;
  GroupMembers(std::vector<int> members)  // NOLINT(google-explicit-constructor): a group is made from its ranks
      : p_(std::make_shared<const std::vector<int>>(std::move(members))) {}
  GroupMembers(std::initializer_list<int> members) : GroupMembers(std::vector<int>(members)) {}

  const std::vector<int>& get() const noexcept { return p_ ? *p_ : empty_vector(); }
  operator const std::vector<int>&() const noexcept { return get(); }  // NOLINT(google-explicit-constructor)

  std::size_t size() const noexcept { return get().size(); }
  bool empty() const noexcept { return get().empty(); }
  int operator[](std::size_t i) const { return get()[i]; }
  int at(std::size_t i) const { return get().at(i); }
  int front() const { return get().front(); }
  int back() const { return get().back(); }
  std::vector<int>::const_iterator begin() const noexcept { return get().begin(); }
  std::vector<int>::const_iterator end() const noexcept { return get().end(); }

  /// Whether both name the very same vector (then they are equal without comparing the ranks).
  bool same(const GroupMembers& o) const noexcept { return p_ == o.p_; }
  friend bool operator==(const GroupMembers& a, const GroupMembers& b) { return a.same(b) || a.get() == b.get(); }

 private:
  static const std::vector<int>& empty_vector() noexcept {
    static const std::vector<int> none;
    return none;
  }

  std::shared_ptr<const std::vector<int>> p_;
};

}  // namespace hzp::schedulers
