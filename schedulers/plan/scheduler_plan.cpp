// Plans of the registered schedulers (plan.hpp): state bytes per component from the shard layout, and
// each collective's calls, elements and bytes per link level for one rank, following the MPI backend's
// algorithm choice (docs/collectives.md "Bytes per level"): ring above collectives.small_message_bytes,
// Bruck all-gather / direct reduce-scatter / recursive-doubling all-reduce below it.
#include "hzp/schedulers/plan.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "hzp/core/error.hpp"
#include "asynchzp/asynchzp_segments.hpp"
#include "asynchzp/ring_sizing.hpp"
#include "hzp/schedulers/common/bucketed_all_reduce.hpp"
#include "hzp/schedulers/common/nested_groups.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"
#include "hzp/schedulers/common/step_support.hpp"

namespace hzp::schedulers {
namespace {

using coll::CollOp;
using coll::LinkLevel;

// One rank's view of a group: the world ranks of its members in position order and its own position.
struct Geometry {
  std::vector<int> members;
  int pos = 0;
  int rpn = 0;
  int size() const { return static_cast<int>(members.size()); }
  int level_to(int peer_pos) const {
    if (rpn <= 0) return static_cast<int>(LinkLevel::intra);
    const bool same = members[pos] / rpn == members[peer_pos] / rpn;
    return static_cast<int>(same ? LinkLevel::intra : LinkLevel::inter);
  }
};

Geometry geometry(std::vector<int> members, int world_rank, int rpn) {
  Geometry g;
  g.members = std::move(members);
  g.pos = static_cast<int>(std::find(g.members.begin(), g.members.end(), world_rank) - g.members.begin());
  g.rpn = rpn;
  return g;
}

std::size_t acc_size(DType t) { return t == DType::bf16 ? 4 : dtype_size(t); }

class Builder {
 public:
  Builder(SchedulerPlan& plan, std::size_t small) : plan_(plan), small_(small) {}

  PlannedCollective& entry(CollOp op, const std::string& group, const Geometry& g, DType t, const std::string& when) {
    for (PlannedCollective& c : plan_.collectives)
      if (c.op == op && c.group == group && c.dtype == t && c.when == when) return c;
    PlannedCollective c;
    c.op = op;
    c.group = group;
    c.group_size = g.size();
    c.dtype = t;
    c.when = when;
    plan_.collectives.push_back(c);
    return plan_.collectives.back();
  }

  // `times` identical calls of an all-gather of a shard of n elements.
  void all_gather(const std::string& group, const Geometry& g, std::int64_t n, DType t, std::int64_t times,
                  const std::string& when) {
    PlannedCollective& c = entry(CollOp::all_gather, group, g, t, when);
    c.calls += times;
    c.elements += n * times;
    const int p = g.size();
    if (p <= 1 || n == 0) return;
    const std::uint64_t e = dtype_size(t);
    if (coll::algbw_bytes(CollOp::all_gather, static_cast<std::size_t>(n), t, p) < small_) {
      for (int k = 1; k < p; k *= 2)  // Bruck: round k sends min(2^k, p − 2^k) blocks to rank − 2^k
        c.bytes[g.level_to((g.pos - k + p) % p)] += std::uint64_t(std::min(k, p - k)) * n * e * times;
    } else {
      c.bytes[g.level_to((g.pos + 1) % p)] += std::uint64_t(p - 1) * n * e * times;
    }
  }

  // reduce-scatter of a full input of `full` elements (p equal blocks).
  void reduce_scatter(const std::string& group, const Geometry& g, std::int64_t full, DType t, std::int64_t times,
                      const std::string& when) {
    PlannedCollective& c = entry(CollOp::reduce_scatter, group, g, t, when);
    c.calls += times;
    c.elements += full * times;
    const int p = g.size();
    if (p <= 1 || full == 0) return;
    const std::uint64_t n = static_cast<std::uint64_t>(full / p);
    if (coll::algbw_bytes(CollOp::reduce_scatter, static_cast<std::size_t>(full), t, p) < small_) {
      for (int q = 0; q < p; ++q)  // direct: own block of every other rank straight to it
        if (q != g.pos) c.bytes[g.level_to(q)] += n * dtype_size(t) * times;
    } else {
      c.bytes[g.level_to((g.pos + 1) % p)] += (n * dtype_size(t) + std::uint64_t(p - 2) * n * acc_size(t)) * times;
    }
  }

  void all_reduce(const std::string& group, const Geometry& g, std::int64_t count, DType t, std::int64_t times,
                  const std::string& when) {
    PlannedCollective& c = entry(CollOp::all_reduce, group, g, t, when);
    c.calls += times;
    c.elements += count * times;
    const int p = g.size();
    if (p <= 1 || count == 0) return;
    const std::uint64_t e = dtype_size(t), ea = acc_size(t);
    if (coll::algbw_bytes(CollOp::all_reduce, static_cast<std::size_t>(count), t, p) < small_) {
      // Recursive doubling over the largest power of two q <= p (exact for p a power of two; the fold-in
      // and hand-back rounds of other p are approximated as one extra full vector each).
      int q = 1;
      while (q * 2 <= p) q *= 2;
      if (g.pos < q)
        for (int k = 1; k < q; k *= 2) c.bytes[g.level_to(g.pos ^ k)] += std::uint64_t(count) * ea * times;
      if (p != q) c.bytes[g.level_to(g.pos < q ? (g.pos + q) % p : g.pos - q)] += std::uint64_t(count) * e * times;
      return;
    }
    // Ring: reduce-scatter then all-gather over p nearly equal chunks c_j = ⌊N/p⌋ + [j < N mod p].
    auto chunk = [&](int j) { return std::uint64_t(count / p + ((((j % p) + p) % p) < count % p ? 1 : 0)); };
    std::uint64_t b = 0;
    for (int s = 0; s < p - 1; ++s) b += chunk(g.pos - s - 1) * (s == 0 ? e : ea);
    for (int s = 0; s < p - 1; ++s) b += chunk(g.pos - s) * e;
    c.bytes[g.level_to((g.pos + 1) % p)] += b * times;
  }

 private:
  SchedulerPlan& plan_;
  std::size_t small_;
};

}  // namespace

std::uint64_t SchedulerPlan::state_total() const {
  std::uint64_t t = 0;
  for (std::uint64_t b : state_bytes) t += b;
  return t;
}

std::string SchedulerPlan::to_text() const {
  std::ostringstream o;
  auto gib = [](double b) { return b / (1024.0 * 1024.0 * 1024.0); };
  o << "scheduler " << scheduler << ", W = " << world_size << ", rank " << rank << ", N = " << params
    << " parameters, " << micro_batches_per_rank << " micro-batches per rank per step\n";
  o << "model state per rank (bytes, GiB):\n";
  for (std::size_t i = 0; i < state_bytes.size(); ++i)
    o << "  " << std::left << std::setw(8) << kStateComponents[i] << std::right << std::setw(18) << state_bytes[i]
      << std::setw(12) << std::fixed << std::setprecision(3) << gib(double(state_bytes[i])) << "\n";
  o << "  " << std::left << std::setw(8) << "total" << std::right << std::setw(18) << state_total() << std::setw(12)
    << gib(double(state_total())) << "  (" << std::setprecision(2) << double(state_total()) / double(std::max<std::int64_t>(params, 1))
    << " bytes/parameter)\n";
  // Ring hops go to the next rank of a group, so the level split is per rank: a rank at a node boundary
  // sends all of a ring's bytes between nodes, its neighbours none (hzpbench plan --rank).
  o << "collectives per step (bytes sent by rank " << rank << "; the intra/inter split differs by rank):\n";
  o << "  " << std::left << std::setw(15) << "op" << std::setw(9) << "group" << std::right << std::setw(6) << "size"
    << std::setw(6) << "dtype" << std::setw(9) << "calls" << std::setw(16) << "elements" << std::setw(18) << "intra bytes"
    << std::setw(18) << "inter bytes" << "  when\n";
  for (const PlannedCollective& c : collectives)
    o << "  " << std::left << std::setw(15) << coll::coll_op_name(c.op) << std::setw(9) << c.group << std::right
      << std::setw(6) << c.group_size << std::setw(6) << dtype_name(c.dtype) << std::setw(9) << c.calls << std::setw(16)
      << c.elements << std::setw(18) << c.bytes[0] << std::setw(18) << c.bytes[1] << "  " << c.when << "\n";
  return o.str();
}

namespace detail {

// Registry-side planners (scheduler_registry.cpp dispatches by name).
SchedulerPlan plan_none(const PlanInputs& in);
SchedulerPlan plan_ddp(const PlanInputs& in);
SchedulerPlan plan_zero(const PlanInputs& in, int stage, bool hybrid);
SchedulerPlan plan_asynchzp(const PlanInputs& in);

namespace {
SchedulerPlan base(const char* name, const PlanInputs& in) {
  HZP_CHECK(in.layout != nullptr, "plan: a parameter layout is required");
  if (in.world_size < 1 || in.rank < 0 || in.rank >= in.world_size)
    HZP_THROW(ConfigError, "plan: world size ", in.world_size, " and rank ", in.rank, " do not fit");
  if (in.ranks_per_node > 0 && in.world_size % in.ranks_per_node != 0)
    HZP_THROW(ConfigError, "plan: topology.ranks_per_node = ", in.ranks_per_node, " does not divide the world size ",
              in.world_size);
  SchedulerPlan p;
  p.scheduler = name;
  p.world_size = in.world_size;
  p.rank = in.rank;
  p.params = in.layout->total_numel();
  return p;
}

void check_batches(const char* name, const PlanInputs& in, int group) {
  const std::int64_t mb = in.train.micro_batches();
  std::ostringstream bad;
  if (group > 0 && in.world_size % group != 0)
    bad << "\n  scheduler.group_size = " << group << " does not divide the world size " << in.world_size;
  if (mb % in.world_size != 0)
    bad << "\n  train.global_batch = " << in.train.global_batch << " / train.micro_batch_size = "
        << in.train.micro_batch_size << " gives " << mb << " micro-batches per step, not a multiple of dp = W = "
        << in.world_size;
  if (!bad.str().empty()) HZP_THROW(ConfigError, "scheduler ", name, " at world size ", in.world_size, ":", bad.str());
}
}  // namespace

// Deterministic mode: gradients are summed as int64 fixed point (8 bytes per element in memory and on the
// wire), the loss is all-gathered per micro-batch, and every attempt of a step ends with a MAX all-reduce
// of the per-tensor maxima and the overflow flags (the plan counts one attempt: retries cannot be planned).
DType grad_wire_dtype(const PlanInputs& in) { return in.train.deterministic ? DType::i64 : DType::f32; }
std::uint64_t grad_bytes(const PlanInputs& in) { return dtype_size(grad_wire_dtype(in)); }

void add_scalars(Builder& b, const PlanInputs& in, std::int64_t micro_batches_per_rank) {
  std::vector<int> all;
  for (int r = 0; r < in.world_size; ++r) all.push_back(r);
  const Geometry world = geometry(all, in.rank, in.ranks_per_node);
  if (!in.train.deterministic) {
    b.all_reduce("scalars", world, 1, DType::f64, 1, "per step (loss)");
    return;
  }
  std::int64_t tensors = 0;
  for (const workloads::Unit& u : in.layout->units()) tensors += static_cast<std::int64_t>(u.tensors.size());
  b.all_reduce("scalars", world, tensors + 2, DType::f64, 1, "per attempt (fixed-point tally, max)");
  b.all_gather("scalars", world, micro_batches_per_rank, DType::f64, 1, "per step (loss per micro-batch)");
}

SchedulerPlan plan_none(const PlanInputs& in) {
  if (in.world_size != 1)
    HZP_THROW(ConfigError, "scheduler none is the single-rank reference and runs on 1 rank, not topology.world_size = ",
              in.world_size, "; plan it with --set topology.world_size=1");
  SchedulerPlan p = base("none", in);
  const std::uint64_t n = static_cast<std::uint64_t>(p.params);
  const bool mixed = workloads::has_separate_master(in.train.precision);
  p.micro_batches_per_rank = in.train.micro_batches();
  // Deterministic mode: the fp32 micro-batch gradient (also the step's converted sum) and the int64 sum.
  p.state_bytes = {n * dtype_size(workloads::param_dtype(in.train.precision)), n * (in.train.deterministic ? 12 : 4),
                   mixed ? n * 4 : 0, n * 4, n * 4};
  return p;
}

SchedulerPlan plan_ddp(const PlanInputs& in) {
  SchedulerPlan p = base("ddp", in);
  check_batches("ddp", in, 0);
  const std::uint64_t n = static_cast<std::uint64_t>(p.params);
  const bool mixed = workloads::has_separate_master(in.train.precision);
  p.micro_batches_per_rank = in.train.micro_batches() / in.world_size;
  p.state_bytes = {n * dtype_size(workloads::param_dtype(in.train.precision)), n * grad_bytes(in), mixed ? n * 4 : 0,
                   n * 4, n * 4};
  Builder b(p, in.small_message_bytes);
  std::vector<int> all;
  for (int r = 0; r < in.world_size; ++r) all.push_back(r);
  const Geometry world = geometry(all, in.rank, in.ranks_per_node);
  const auto bucket_bytes = std::max<std::size_t>(static_cast<std::size_t>(in.options.bucket_mb * 1024.0 * 1024.0), 1);
  for (const BucketedAllReduce::Bucket& k : BucketedAllReduce::make_buckets(*in.layout, bucket_bytes, grad_bytes(in)))
    b.all_reduce("dp", world, k.numel, grad_wire_dtype(in), 1, "per step (buckets, last micro-batch)");
  add_scalars(b, in, p.micro_batches_per_rank);
  return p;
}

SchedulerPlan plan_zero(const PlanInputs& in, int stage, bool hybrid) {
  const char* name = hybrid ? "hsdp" : stage == 1 ? "zero1" : stage == 2 ? "zero2" : "zero3";
  SchedulerPlan p = base(name, in);
  const int group = hybrid ? in.options.group_size : 0;
  check_batches(name, in, group);
  const int w = in.world_size;
  const int z = group > 0 ? group : w;
  const ShardLayout sl = ShardLayout::per_unit(*in.layout, z);
  const DType pdt = workloads::param_dtype(in.train.precision);
  const std::uint64_t pe = dtype_size(pdt);
  const std::uint64_t full = static_cast<std::uint64_t>(sl.padded_total());
  const std::uint64_t slice = static_cast<std::uint64_t>(sl.slice_total());
  const bool mixed = workloads::has_separate_master(in.train.precision);
  p.micro_batches_per_rank = in.train.micro_batches() / w;
  const DType gw = grad_wire_dtype(in);
  p.state_bytes = {(stage < 3 ? full : slice) * pe, (stage == 1 ? full : slice) * grad_bytes(in), mixed ? slice * 4 : 0,
                   slice * 4, slice * 4};
  Builder b(p, in.small_message_bytes);
  // The groups of the scheduler's own mesh (step/process_groups.hpp): dp_shard of Z, dp_replicate of W / Z.
  const coll::RankMesh mesh = data_parallel_dims(w, z).mesh(
      coll::Topology::virtual_nodes(w, in.ranks_per_node > 0 ? in.ranks_per_node : w, in.rank));
  const Geometry shard = geometry(mesh.group(kAxisShard, in.rank), in.rank, in.ranks_per_node);
  const std::int64_t m = p.micro_batches_per_rank;
  for (int u = 0; u < sl.num_segments(); ++u) {
    if (stage == 3) {
      // Before forward and again before backward, every micro-batch.
      b.all_gather("shard", shard, sl.slice_numel(u), pdt, 2 * m, "per micro-batch (forward + backward)");
      b.reduce_scatter("shard", shard, sl.padded_numel(u), gw, m, "per micro-batch (gradients)");
    } else if (stage == 2) {
      b.reduce_scatter("shard", shard, sl.padded_numel(u), gw, m, "per micro-batch (gradients)");
    } else {
      b.reduce_scatter("shard", shard, sl.padded_numel(u), gw, 1, "per step (gradients)");
    }
  }
  if (hybrid) {
    const Geometry replica = geometry(mesh.group(kAxisReplicate, in.rank), in.rank, in.ranks_per_node);
    if (replica.size() > 1) b.all_reduce("replica", replica, sl.slice_total(), gw, 1, "per step (gradient shards)");
  }
  // The norm: an fp64 sum of squares, or in deterministic mode its exact 128-bit sum as four int64 limbs.
  if (shard.size() > 1) {
    if (in.train.deterministic)
      b.all_reduce("shard", shard, 4, DType::i64, 1, "per step (norm, exact)");
    else
      b.all_reduce("shard", shard, 1, DType::f64, 1, "per step (norm)");
  }
  if (stage < 3)
    for (int u = 0; u < sl.num_segments(); ++u)
      b.all_gather("shard", shard, sl.slice_numel(u), pdt, 1, "per step (updated parameters)");
  add_scalars(b, in, m);
  return p;
}

SchedulerPlan plan_asynchzp(const PlanInputs& in) {
  SchedulerPlan p = base("asynchzp", in);
  check_batches("asynchzp", in, 0);
  const int w = in.world_size;
  const NestedGroups g = nested_groups_from(in.options, w);
  const bool rs_end = in.options.step_end == SchedulerOptions::StepEnd::reduce_scatter;
  const Segments seg(*in.layout, in.options.launch, g, rs_end ? w : g.z1());
  const DType pdt = workloads::param_dtype(in.train.precision);
  // The ring pool the run would build: a pool too small is refused here, before a run creates anything.
  if (in.options.async && in.options.pool_fallback == SchedulerOptions::PoolFallback::error)
    check_rings_fit(size_rings(*in.layout, seg, pdt, in.options.prefetch, in.options.pool_mb), *in.layout, seg, pdt,
                    in.options.pool_mb, in.options.prefetch);
  const bool mixed = workloads::has_separate_master(in.train.precision);
  const auto s3 = static_cast<std::uint64_t>(seg.l3.slice_total()), s2 = static_cast<std::uint64_t>(seg.l2.slice_total()),
             s1 = static_cast<std::uint64_t>(seg.l1.slice_total());
  p.micro_batches_per_rank = in.train.micro_batches() / w;
  const DType gw = grad_wire_dtype(in);
  p.state_bytes = {s3 * dtype_size(pdt), s2 * grad_bytes(in), mixed ? s1 * 4 : 0, s1 * 4, s1 * 4};
  Builder b(p, in.small_message_bytes);
  auto geo = [&](auto slot_of) { return geometry(g.members(in.rank, slot_of), in.rank, in.ranks_per_node); };
  const Geometry z3 = geo([&](int r) { return g.z3_group(r); });
  const Geometry z2 = geo([&](int r) { return g.z2_group(r); });
  const Geometry z1 = geo([&](int r) { return g.z1_group(r); });
  const Geometry replica = geo([&](int r) { return g.replica_group(r); });
  const Geometry opt_replica = geo([&](int r) { return g.opt_replica_group(r); });
  const Geometry refresh = geo([&](int r) { return g.refresh_group(r); });
  const std::int64_t m = p.micro_batches_per_rank;
  for (int s = 0; s < seg.l3.num_segments(); ++s) {
    b.all_gather("z3", z3, seg.l3.slice_numel(s), pdt, 2 * m, "per micro-batch (forward + backward)");
    if (seg.l2.slice_numel(s) > 0)
      b.reduce_scatter("z2", z2, seg.l2.padded_numel(s), gw, m, "per micro-batch (gradients)");
  }
  if (z1.size() > 1) {
    if (in.train.deterministic)
      b.all_reduce("z1", z1, 4, DType::i64, 1, "per step (norm, exact)");
    else
      b.all_reduce("z1", z1, 1, DType::f64, 1, "per step (norm)");
  }
  if (!rs_end) {
    if (replica.size() > 1 && s2 > 0)
      b.all_reduce("replica", replica, seg.l2.slice_total(), gw, 1, "per step (gradient shards)");
  } else {
    for (int s = 0; s < seg.l3.num_segments(); ++s) {
      if (replica.size() > 1 && seg.in_grad_slice.slice_numel(s) > 0)
        b.reduce_scatter("replica", replica, seg.l2.slice_numel(s), gw, 1, "per step (gradient shards)");
      if (opt_replica.size() > 1 && seg.l1.slice_numel(s) > 0)
        b.all_gather("opt_replica", opt_replica, seg.in_opt_slice.slice_numel(s), gw, 1,
                     "per step (optimizer-slice gradients)");
    }
  }
  if (refresh.size() > 1)
    for (int s = 0; s < seg.l3.num_segments(); ++s)
      if (seg.l3.slice_numel(s) > 0)
        b.all_gather("refresh", refresh, seg.in_shard.slice_numel(s), pdt, 1, "per step (updated parameters)");
  add_scalars(b, in, m);
  return p;
}

}  // namespace detail
}  // namespace hzp::schedulers
