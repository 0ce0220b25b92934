// NestedGroups: the rank mesh of hierarchical sharding (AsyncHZP, docs/data-parallel.md). Group sizes
// z3 | z2 | z1 | W (parameters, gradients, optimizer states), each group a run of contiguous ranks, so
// z2 = z3 = ranks_per_node keeps the per-micro-batch collectives inside a node. Slice indices are chosen
// so that a rank's optimizer slice lies inside its gradient slice, which lies inside its parameter shard;
// every exchange is then an all-gather or a reduce-scatter over one of the groups below, each ordered (by
// its split key) so that position k of the group holds block k. Pure arithmetic, shared by the scheduler
// (communicator splits) and its plan (ring geometry); tests derive their expectations independently.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/process_groups.hpp"

namespace hzp::schedulers {

/// A group a rank belongs to: ranks with equal `color` form it, ordered by `key` (Communicator::split_by).
using coll::GroupSlot;

/// For world rank r, with f2 = z2/z3, f1 = z1/z2, R = W/z2, Q = W/z1 and r = d·z1 + c·z2 + a·z3 + b:
///   parameter shard  b                   (of z3 per unit)
///   gradient slice   g = b·f2 + a        (of z2; lies inside shard b)
///   optimizer slice  o = g·f1 + c        (of z1; lies inside gradient slice g)
class NestedGroups {
 public:
  /// Requires z3 | z2 | z1 | w, all >= 1 (the scheduler validates and names the values first).
  NestedGroups(int w, int z1, int z2, int z3);

  int world() const noexcept { return w_; }
  int z1() const noexcept { return z1_; }
  int z2() const noexcept { return z2_; }
  int z3() const noexcept { return z3_; }
  int grad_replicas() const noexcept { return w_ / z2_; }  ///< R
  int opt_replicas() const noexcept { return w_ / z1_; }   ///< Q

  int param_index(int r) const noexcept { return r % z3_; }
  int grad_index(int r) const noexcept;
  int opt_index(int r) const noexcept;

  /// "z3": the parameter all-gathers (contiguous z3 ranks, ordered by shard index).
  GroupSlot z3_group(int r) const noexcept { return {r / z3_, r % z3_}; }
  /// "z2": the per-micro-batch gradient reduce-scatter (contiguous z2 ranks, ordered by gradient slice).
  GroupSlot z2_group(int r) const noexcept { return {r / z2_, grad_index(r)}; }
  /// "z1": the ranks whose optimizer slices partition the model once (the gradient norm).
  GroupSlot z1_group(int r) const noexcept { return {r / z1_, opt_index(r)}; }
  /// "replica": the R ranks holding the same gradient slice (stride z2); ordered so that, in the
  /// reduce-scatter step end, position c·Q + d receives piece d of the optimizer slice c inside it.
  GroupSlot replica_group(int r) const noexcept;
  /// "opt_replica": the Q ranks holding the same optimizer slice (stride z1), ordered by d = r / z1.
  GroupSlot opt_replica_group(int r) const noexcept { return {r % z1_, r / z1_}; }
  /// "refresh": the z1/z3 ranks of one z1 group whose optimizer slices tile one parameter shard,
  /// ordered by the optimizer slice's position inside that shard.
  GroupSlot refresh_group(int r) const noexcept;

  /// The world ranks of the group `slot_of(r)` selects, in position (key) order.
  template <typename SlotOf>
  std::vector<int> members(int r, SlotOf slot_of) const {
    const GroupSlot mine = slot_of(r);
    std::vector<std::pair<int, int>> m;
    for (int q = 0; q < w_; ++q)
      if (slot_of(q).color == mine.color) m.emplace_back(slot_of(q).key, q);
    std::sort(m.begin(), m.end());
    std::vector<int> out;
    for (const auto& [k, q] : m) out.push_back(q);
    return out;
  }

 private:
  int w_, z1_, z2_, z3_;
};

/// asynchzp's groups from scheduler.z1/z2/z3 (0 = the next larger group; z1: all of them) over the ranks of one
/// pipeline stage that hold its weights (dp · cp = world_size / scheduler.pp), after checking them, scheduler.pp
/// (dividing world_size), scheduler.cp (dividing those ranks and z1) and prefetch / pool_mb: one ConfigError naming
/// every value and the fix otherwise.
NestedGroups nested_groups_from(const SchedulerOptions& o, int world_size);

/// asynchzp's mesh degrees at W ranks: pp = scheduler.pp stages (outermost), cp = scheduler.cp, the optimizer group
/// z1 as dp_shard = z1 / cp whole context-parallel groups, replicated W / (pp · z1) times. With cp innermost the
/// z-groups, contiguous runs of a stage's ranks, nest with the cp groups: z3 = cp makes every parameter group
/// exactly a cp group.
ParallelDims asynchzp_parallel_dims(const SchedulerOptions& o, int w);

}  // namespace hzp::schedulers
