// What asynchzp's scheduler.tied_split tests share (test_asynchzp_tied_split*.cpp): a layout case (z-groups, cp,
// async or inline, step end, vocabulary), a run of it, the option off against its two forms (losses, norms and
// parameters), and the bytes each group moves against the option off's, the closed forms and the plan. The rows a
// rank sends by all-to-all-v are computed here from the data and the slices' arithmetic alone, never from the code
// under test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "data_parallel_test_util.hpp"
#include "nd_test_util.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {

using TiedSplit = schedulers::SchedulerOptions::TiedSplit;

struct SplitCase {
  int z1 = 0, z2 = 0, z3 = 0;
  bool async = true;
  bool rs_end = false;
  std::int64_t vocab = 0;  // 0: tiny's 64 (every slice whole rows); 65 or 66: slice boundaries inside rows
  int cp = 1;              // scheduler.cp: each rank holds 1/cp of every sequence
  std::string label() const {
    return (cp > 1 ? "cp=" + std::to_string(cp) + " " : std::string()) + "z1=" + std::to_string(z1) +
           " z2=" + std::to_string(z2) + " z3=" + std::to_string(z3) + (async ? " async" : " inline") +
           (rs_end ? " step_end=reduce_scatter" : "") + (vocab ? " vocab=" + std::to_string(vocab) : "");
  }
  schedulers::SchedulerOptions options(TiedSplit split) const {
    schedulers::SchedulerOptions o;
    o.z1 = z1, o.z2 = z2, o.z3 = z3, o.cp = cp, o.async = async, o.tied_split = split;
    if (rs_end) o.step_end = schedulers::SchedulerOptions::StepEnd::reduce_scatter;
    return o;
  }
};

inline coll::Topology two_nodes(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), std::max(1, world.size() / 2), world.rank());
}

inline coll::Topology one_node(const coll::Communicator& world) {
  return coll::Topology::virtual_nodes(world.size(), world.size(), world.rank());
}

struct SplitRun : NdRun {
  SplitRun(coll::Communicator& world, const SplitCase& c, TiedSplit split, bool deterministic = false)
      : SplitRun(world, two_nodes(world), c, split, deterministic) {}
  SplitRun(coll::Communicator& world, const coll::Topology& topo, const SplitCase& c, TiedSplit split,
           bool deterministic)
      : NdRun(world, topo,
              {c.options(split), vocab_of(c), false, deterministic, 0, workloads::Precision::fp32, "asynchzp"}) {}
  static std::function<void(workloads::LlamaConfig&)> vocab_of(const SplitCase& c) {
    if (c.vocab == 0) return nullptr;
    return [v = c.vocab](workloads::LlamaConfig& m) { m.vocab = v; };
  }
};

inline std::vector<float> master_params(SplitRun& r) {
  return dynamic_cast<schedulers::DataParallelScheduler&>(*r.scheduler).gather_master_params();
}

/// The option off, rows_alltoall and rows_allgather side by side for 4 steps: the two forms' losses, norms and
/// parameters within 1e-5 of the option off's (the reference), and bitwise equal to each other.
inline void expect_forms_match_the_option_off(coll::Communicator& world, const SplitCase& c) {
  SplitRun off(world, c, TiedSplit::off), owners(world, c, TiedSplit::rows_alltoall),
      gathered(world, c, TiedSplit::rows_allgather);
  for (int i = 0; i < 4; ++i) {
    const schedulers::StepStats a = off.step(i), b = owners.step(i), g = gathered.step(i);
    EXPECT_LE(rel_diff(b.loss, a.loss), 1e-5) << c.label() << " step " << i;
    EXPECT_LE(rel_diff(b.grad_norm, a.grad_norm), 1e-5) << c.label() << " step " << i;
    EXPECT_EQ(b.loss, g.loss) << c.label() << " step " << i << ": the two forms differ";
    EXPECT_EQ(b.grad_norm, g.grad_norm) << c.label() << " step " << i << ": the two forms differ";
  }
  const std::vector<float> pa = master_params(off), pb = master_params(owners), pg = master_params(gathered);
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_EQ(pg.size(), pb.size());
  EXPECT_LE(rel_l2(pb.data(), pa.data(), static_cast<std::int64_t>(pa.size())), 1e-5) << c.label();
  EXPECT_EQ(std::memcmp(pb.data(), pg.data(), pb.size() * sizeof(float)), 0) << c.label() << ": the two forms";
}

/// Deterministic mode: two runs of cases[0], the shardings cases[1] and cases[2] and the all-gathered rows bitwise
/// equal over 5 steps (losses, norms, parameters); within 1e-5 of the option off (the rows add summands to the
/// fixed-point limit, so its exponents may differ from the option off's).
inline void expect_deterministic_bitwise(coll::Communicator& world, const std::vector<SplitCase>& cs) {
  const TiedSplit a2a = TiedSplit::rows_alltoall;
  SplitRun a(world, cs[0], a2a, true), b(world, cs[0], a2a, true), other(world, cs[1], a2a, true),
      inl(world, cs[2], a2a, true), gathered(world, cs[0], TiedSplit::rows_allgather, true),
      off(world, cs[0], TiedSplit::off, true);
  for (int i = 0; i < 5; ++i) {
    const schedulers::StepStats x = a.step(i), y = b.step(i), z = other.step(i), s = inl.step(i), g = gathered.step(i),
                                n = off.step(i);
    EXPECT_EQ(x.loss, y.loss) << "step " << i << ": two runs differ";
    EXPECT_EQ(x.grad_norm, y.grad_norm) << "step " << i << ": two runs differ";
    EXPECT_EQ(x.grad_norm, z.grad_norm) << cs[1].label() << " step " << i << ": another sharding differs";
    EXPECT_EQ(x.grad_norm, s.grad_norm) << cs[2].label() << " step " << i << ": another sharding differs";
    EXPECT_EQ(x.loss, g.loss) << "step " << i << ": the all-gathered rows differ";
    EXPECT_EQ(x.grad_norm, g.grad_norm) << "step " << i << ": the all-gathered rows differ";
    EXPECT_LE(rel_diff(x.loss, n.loss), 1e-5) << "step " << i << ": against the option off";
    EXPECT_LE(rel_diff(x.grad_norm, n.grad_norm), 1e-5) << "step " << i << ": against the option off";
  }
  const std::vector<float> pa = master_params(a), pb = master_params(b), pz = master_params(other),
                           pg = master_params(gathered), pn = master_params(off);
  ASSERT_EQ(pa.size(), pz.size());
  ASSERT_EQ(pa.size(), pg.size());
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0) << "two runs' parameters";
  EXPECT_EQ(std::memcmp(pa.data(), pz.data(), pa.size() * sizeof(float)), 0) << "two shardings' parameters";
  EXPECT_EQ(std::memcmp(pa.data(), pg.data(), pa.size() * sizeof(float)), 0) << "the two forms' parameters";
  EXPECT_LE(rel_l2(pa.data(), pn.data(), static_cast<std::int64_t>(pa.size())), 1e-5) << "the option off's";
}

/// Bytes per group and op, every group but the rows' and the loss's.
inline std::map<std::pair<std::string, int>, std::uint64_t> bytes_but_rows(const coll::CounterSnapshot& d) {
  std::map<std::pair<std::string, int>, std::uint64_t> out;
  for (std::size_t g = 0; g < d.groups.size(); ++g)
    for (int op = 0; op < coll::kNumCollOps; ++op) {
      if (d.groups[g] == "tied_rows" || d.groups[g] == "scalars" || d.per_group[g][op].calls == 0) continue;
      for (int l = 0; l < coll::kNumLinkLevels; ++l) out[{d.groups[g], op}] += d.per_group[g][op].level[l].bytes;
    }
  return out;
}

/// The rank's tokens of one micro-batch's sequences (docs/context-parallel.md: each sequence cut in 2·cp chunks,
/// rank c of the cp group holding chunks c and 2·cp − 1 − c; the whole sequence when cp = 1).
inline std::set<std::int64_t> own_token_ids(const SplitRun& run, int cp, int cp_rank, std::int64_t micro_batch,
                                            std::int64_t step) {
  const workloads::TrainConfig& train = run.setup.train;
  const std::int64_t t = run.setup.model_config.seq_len, chunk = t / (2 * cp);
  std::set<std::int64_t> ids;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(t + 1));
  for (std::int64_t k = 0; k < train.micro_batch_size; ++k) {
    run.setup.source->sample(step * train.global_batch + micro_batch * train.micro_batch_size + k, tokens);
    for (const std::int64_t c : {static_cast<std::int64_t>(cp_rank), static_cast<std::int64_t>(2 * cp - 1 - cp_rank)})
      ids.insert(tokens.begin() + c * chunk, tokens.begin() + (c + 1) * chunk);
  }
  return ids;
}

/// What rank `me` sends in the rows' all-to-all-v of `step`, from the data and the slices' arithmetic alone: its
/// last micro-batch (docs/data.md "Batches": micro-batch j goes to data-parallel rank j mod dp; cp is the innermost
/// axis, so world rank me is data-parallel rank me / cp and context rank me mod cp), its tokens of that
/// micro-batch's distinct ids, and for every other rank q the ids whose row [id·d, (id+1)·d) meets q's optimizer
/// slice of the table, slice o(q) (r = ·z1 + c·z2 + a·z3 + b: o = (b·z2/z3 + a)·z1/z2 + c) of the table padded to a
/// multiple of z1 (W for the reduce-scatter step end) and cut in z1 equal slices. A row across a slice boundary
/// counts for both owners.
struct RowsSent {
  std::uint64_t distinct = 0, to_others = 0;
};
inline RowsSent rows_to_owners(const SplitRun& run, const SplitCase& c, int w, int me, std::int64_t step) {
  const workloads::TrainConfig& train = run.setup.train;
  const std::int64_t d = run.setup.model_config.hidden, numel = run.setup.model_config.vocab * d;
  const int dp = w / c.cp;
  const std::int64_t j = me / c.cp + (train.global_batch / train.micro_batch_size / dp - 1) * dp;
  const std::set<std::int64_t> ids = own_token_ids(run, c.cp, me % c.cp, j, step);
  const std::int64_t pad = c.rs_end ? w : c.z1, slice = (numel + pad - 1) / pad * pad / c.z1;
  RowsSent out;
  out.distinct = ids.size();
  for (int q = 0; q < w; ++q) {
    if (q == me) continue;
    const int o = ((q % c.z3) * (c.z2 / c.z3) + (q % c.z2) / c.z3) * (c.z1 / c.z2) + (q % c.z1) / c.z2;
    const std::int64_t lo = o * slice, hi = std::min(lo + slice, numel);
    for (std::int64_t id : ids)
      if (id * d < hi && id * d + d > lo) ++out.to_others;
  }
  return out;
}

inline std::uint64_t sent_bytes(const coll::OpTotals& t) {
  std::uint64_t got = 0;
  for (int l = 0; l < coll::kNumLinkLevels; ++l) got += t.level[l].bytes;
  return got;
}

/// One case's step-1 bytes on one node (as the plan's levels assume), both forms against the option off: every
/// group but the rows' the same; rows_allgather's the closed form (W−1)·T·(4 + d·b) with T the rank's tokens of a
/// micro-batch (mbs · seq_len / cp) and the plan equal to the run; rows_alltoall's counts (W−1)·8 bytes, its rows
/// the closed form of rows_to_owners, the plan equal in every call and every other op, and the rows' bytes within
/// half of the plan's uniform-owner expectation scaled to the micro-batch's distinct rows.
inline void expect_bytes_are_the_option_offs_plus_the_rows(coll::Communicator& world, const SplitCase& c,
                                                           bool deterministic) {
  const auto w = static_cast<std::uint64_t>(world.size());
  SplitRun off(world, one_node(world), c, TiedSplit::off, deterministic);
  const coll::CounterSnapshot d_off = off.second_step_counters(world);
  for (TiedSplit mode : {TiedSplit::rows_alltoall, TiedSplit::rows_allgather}) {
    const bool to_owners = mode == TiedSplit::rows_alltoall;
    SCOPED_TRACE(c.label() + (deterministic ? " deterministic" : "") + (to_owners ? " rows_alltoall" : " rows_allgather"));
    SplitRun on(world, one_node(world), c, mode, deterministic);
    const coll::CounterSnapshot d_on = on.second_step_counters(world);
    EXPECT_EQ(bytes_but_rows(d_on), bytes_but_rows(d_off));
    const auto t =
        static_cast<std::uint64_t>(on.setup.train.micro_batch_size * on.setup.model_config.seq_len / c.cp);
    const auto dim = static_cast<std::uint64_t>(on.setup.model_config.hidden);
    const std::uint64_t row = 4 + dim * (deterministic ? 8 : 4);
    const schedulers::SchedulerPlan plan = on.plan(c.options(mode), world.size(), world.rank());
    if (!to_owners) {
      const coll::OpTotals rows = d_on.total("tied_rows", coll::CollOp::all_gather);
      EXPECT_EQ(rows.calls, 2u);
      EXPECT_EQ(sent_bytes(rows), (w - 1) * t * row) << "(W-1)·T·(4 + d·b) with T = " << t << ", d = " << dim;
      expect_plan_matches_run(plan, d_on);
      continue;
    }
    // The counts (one int64 per rank), then the ids and values of the rows this rank's data sends elsewhere.
    const coll::OpTotals counts = d_on.total("tied_rows", coll::CollOp::all_to_all);
    EXPECT_EQ(counts.calls, 1u);
    EXPECT_EQ(sent_bytes(counts), (w - 1) * 8);
    const RowsSent want = rows_to_owners(on, c, world.size(), world.rank(), 1);
    const coll::OpTotals rows = d_on.total("tied_rows", coll::CollOp::all_to_allv);
    EXPECT_EQ(rows.calls, 2u);
    EXPECT_EQ(sent_bytes(rows), want.to_others * row) << want.to_others << " rows to other ranks";
    // Calls and every other op exactly; the rows' bytes against the plan's expectation of T distinct rows with
    // uniform owners: scaled to the micro-batch's distinct rows, within half of it (owners and boundary rows).
    expect_plan_matches_run(plan, d_on, /*routed_calls_only=*/true);
    std::uint64_t planned = 0;
    for (const auto& p : plan.collectives)
      if (p.group == "tied_rows" && p.op == coll::CollOp::all_to_allv) planned += p.bytes[0] + p.bytes[1];
    const double expected = static_cast<double>(planned) * static_cast<double>(want.distinct) / static_cast<double>(t);
    EXPECT_LE(std::abs(static_cast<double>(sent_bytes(rows)) - expected), 0.5 * expected)
        << "run " << sent_bytes(rows) << " B, plan " << planned << " B for " << t << " rows, " << want.distinct
        << " distinct";
    std::printf("[ rows     ] %s%s rank %d: %llu of %llu distinct rows to others, %llu B sent, plan %llu B (x %.3f)\n",
                c.label().c_str(), deterministic ? " deterministic" : "", world.rank(),
                static_cast<unsigned long long>(want.to_others), static_cast<unsigned long long>(want.distinct),
                static_cast<unsigned long long>(sent_bytes(rows)), static_cast<unsigned long long>(planned),
                static_cast<double>(sent_bytes(rows)) / static_cast<double>(planned));
  }
}

}  // namespace hzp::test
