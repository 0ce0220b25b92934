// NestedGroups (common/nested_groups.hpp): slice indices and group slots of hierarchical sharding.
#include "hzp/schedulers/common/nested_groups.hpp"

#include <sstream>
#include <string>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

NestedGroups::NestedGroups(int w, int z1, int z2, int z3) : w_(w), z1_(z1), z2_(z2), z3_(z3) {
  HZP_CHECK(z3 >= 1 && z2 % z3 == 0 && z1 % z2 == 0 && w % z1 == 0, "NestedGroups: z3 = ", z3, ", z2 = ", z2,
            ", z1 = ", z1, ", W = ", w, " are not nested (z3 | z2 | z1 | W)");
}

// r = d·z1 + c·z2 + a·z3 + b: a is the z3 group's place inside the z2 group, c the z2 group's inside z1.
int NestedGroups::grad_index(int r) const noexcept {
  const int p = r % z2_;
  return (p % z3_) * (z2_ / z3_) + p / z3_;
}

int NestedGroups::opt_index(int r) const noexcept { return grad_index(r) * (z1_ / z2_) + (r % z1_) / z2_; }

GroupSlot NestedGroups::replica_group(int r) const noexcept {
  const int c = (r % z1_) / z2_, d = r / z1_;
  return {r % z2_, c * opt_replicas() + d};
}

GroupSlot NestedGroups::refresh_group(int r) const noexcept {
  // Shard b's optimizer slices are o = b·(z1/z3) + (a·f1 + c): the group is one z1 group's ranks with b.
  return {(r / z1_) * z3_ + param_index(r), opt_index(r) % (z1_ / z3_)};
}

NestedGroups nested_groups_from(const SchedulerOptions& o, int world_size) {
  // The z-groups are laid over the ranks of one pipeline stage that hold its weights (dp · cp): w of them.
  const int pp = o.pp >= 1 && world_size % o.pp == 0 ? o.pp : 1;
  const int w = world_size / pp;
  const int z1 = o.z1 > 0 ? o.z1 : w, z2 = o.z2 > 0 ? o.z2 : z1, z3 = o.z3 > 0 ? o.z3 : z2;
  const std::string where = pp > 1 ? "the " + std::to_string(w) + " ranks of a pipeline stage (W / pp)" : "the world size W";
  std::ostringstream bad;
  if (o.pp < 1 || world_size % o.pp != 0)
    bad << "\n  scheduler.pp = " << o.pp << " does not divide the world size W = " << world_size;
  if (o.z1 < 0 || o.z2 < 0 || o.z3 < 0) {
    bad << "\n  group sizes must be >= 0 (0 = the next larger group; for z1, W / pp)";
  } else {
    if (w % z1 != 0) bad << "\n  scheduler.z1 = " << z1 << " does not divide " << where << " = " << w;
    if (z2 > z1 || z1 % z2 != 0) bad << "\n  scheduler.z2 = " << z2 << " does not divide scheduler.z1 = " << z1;
    if (z3 > z2 || z2 % z3 != 0) bad << "\n  scheduler.z3 = " << z3 << " does not divide scheduler.z2 = " << z2;
    // Context parallelism: the z-groups run over the dp · cp ranks with cp innermost, and the mesh counts the
    // optimizer group as whole cp groups (dp_shard = z1 / cp).
    if (o.cp < 1 || w % o.cp != 0)
      bad << "\n  scheduler.cp = " << o.cp << " does not divide " << where << " = " << w;
    else if (z1 % o.cp != 0)
      bad << "\n  scheduler.z1 = " << z1 << " is not a multiple of scheduler.cp = " << o.cp
          << " (the optimizer group spans whole context-parallel groups)";
  }
  if (o.prefetch < 1) bad << "\n  scheduler.prefetch = " << o.prefetch << " must be >= 1";
  if (o.pool_mb < 0) bad << "\n  scheduler.pool_mb = " << o.pool_mb << " must be >= 0 (0 = sized automatically)";
  if (!bad.str().empty())
    HZP_THROW(ConfigError, "scheduler asynchzp with scheduler.z1 = ", o.z1, ", scheduler.z2 = ", o.z2,
              ", scheduler.z3 = ", o.z3, " (resolved ", z1, ", ", z2, ", ", z3, "), scheduler.cp = ", o.cp,
              ", scheduler.pp = ", o.pp, " at world size W = ", world_size, ":", bad.str(),
              "\n  fix: choose z3 <= z2 <= z1 with z3 | z2 | z1 | W / pp and cp | z1 (e.g. z3 = z2 = "
              "topology.ranks_per_node, or z3 = z2 = cp as the paper's layouts)");
  return NestedGroups(w, z1, z2, z3);
}

ParallelDims asynchzp_parallel_dims(const SchedulerOptions& o, int w) {
  const NestedGroups g = nested_groups_from(o, w);  // ConfigError naming z1, z2, z3, cp, pp and W
  ParallelDims d;
  d.pp = o.pp;
  d.cp = o.cp;
  d.dp_shard = g.z1() / o.cp;
  d.dp_replicate = g.world() / g.z1();
  return d;
}

}  // namespace hzp::schedulers
