// The discrete-event model of one rank's step (step_simulator.hpp). Times start at 0 with the step; each
// stream is a busy-until clock, and so is each link level of the rank (what LinkEmulator::reserve keeps).
#include "hzp/harness/step_simulator.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

using coll::CollOp;
using schedulers::CommPlace;
using schedulers::CommStream;
using schedulers::StepEvent;

int ceil_log2(int p) {
  int r = 0;
  while ((1 << r) < p) ++r;
  return r;
}

// The rank's two link levels as busy-until clocks; a call starts once every level it uses is free.
struct Links {
  double intra_free = 0, nic_free = 0;
};

class Simulation {
 public:
  Simulation(const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& l)
      : d_(d), t_(t), l_(l) {}

  SimulatedStep run() {
    const auto calls = static_cast<int>(d_.calls.size());
    std::vector<std::vector<const StepEvent*>> before(static_cast<std::size_t>(calls)), after(before), params(before);
    std::vector<const StepEvent*> end_compute, end_gradients, end_params;
    for (const StepEvent& e : d_.events) {
      if (e.collective.op == CollOp::send || e.collective.op == CollOp::recv)
        HZP_THROW(UnsupportedError, "simulate: point-to-point calls (", e.collective.when,
                  ") are not simulated yet. Fix: scheduler.pp = 1 and scheduler.cp = 1");
      if (e.call < 0) {
        (e.stream == CommStream::compute ? end_compute : e.stream == CommStream::gradients ? end_gradients : end_params)
            .push_back(&e);
        continue;
      }
      const auto c = static_cast<std::size_t>(e.call);
      if (e.stream == CommStream::params)
        params[c].push_back(&e);
      else if (e.stream == CommStream::gradients || e.place == CommPlace::after_unit)
        after[c].push_back(&e);
      else
        before[c].push_back(&e);
    }
    // The params stream: the step end's refresh first (steady state: the previous step's, issued before this
    // step's first gather), then each gathering unit call's gathers in order; gathering call k may be issued
    // once compute has reached gathering call k - prefetch.
    for (const StepEvent* e : end_params) params_free_ = run_call(*e, params_free_);
    std::vector<int> gathering;
    for (int c = 0; c < calls; ++c)
      if (!params[static_cast<std::size_t>(c)].empty()) gathering.push_back(c);
    std::vector<double> gathered(static_cast<std::size_t>(calls), 0.0);
    std::size_t issued = 0;  // gathering calls whose gathers are placed
    auto issue_up_to = [&](std::size_t k_last, double gate) {
      for (; issued < gathering.size() && issued <= k_last; ++issued) {
        const auto c = static_cast<std::size_t>(gathering[issued]);
        double at = std::max(params_free_, gate);
        for (const StepEvent* e : params[c]) at = run_call(*e, at);
        params_free_ = at;
        gathered[c] = at;
      }
    };
    std::size_t k = 0;  // the next gathering call compute will consume
    double now = 0;
    for (int c = 0; c < calls; ++c) {
      const auto ci = static_cast<std::size_t>(c);
      const auto& [action, unit] = d_.calls[ci];
      if (k < gathering.size() && gathering[k] == c) {
        // Compute reaches the unit: the params stream may now run up to prefetch gathering calls beyond it.
        issue_up_to(k + static_cast<std::size_t>(d_.prefetch), now);
        wait_until(now, gathered[ci]);
        ++k;
      }
      for (const StepEvent* e : before[ci]) wait_until(now, run_call(*e, now));
      const bool fwd = action.kind == schedulers::Action::Kind::forward;
      const double dt = (fwd ? t_.forward_s : t_.backward_s).at(static_cast<std::size_t>(unit));
      now += dt;
      (fwd ? s_.forward_s : s_.backward_s) += dt;
      for (const StepEvent* e : after[ci]) {
        if (e->stream == CommStream::gradients)
          gradients_free_ = run_call(*e, std::max(gradients_free_, now));
        else
          wait_until(now, run_call(*e, now));
      }
    }
    issue_up_to(gathering.size(), now);
    for (const StepEvent* e : end_gradients) gradients_free_ = run_call(*e, std::max(gradients_free_, now));
    wait_until(now, gradients_free_);  // drained before the optimizer
    for (const StepEvent* e : end_compute) wait_until(now, run_call(*e, now));
    s_.compute_s = s_.forward_s + s_.backward_s;
    s_.step_s = now;
    return s_;
  }

 private:
  // The compute thread waits for `until`: exposed communication.
  void wait_until(double& now, double until) {
    if (until > now) {
      s_.exposed_comm_s += until - now;
      now = until;
    }
  }

  // Every call of e issued at `at` on the rank's links, one after the other; returns when the last completes.
  double run_call(const StepEvent& e, double at) {
    const schedulers::PlannedCollective& c = e.collective;
    const int rank = d_.plan.rank;
    // A step repeats few distinct calls (per unit, per micro-batch): each is modelled once, which keeps a
    // world-sized ring's O(p²) rounds affordable at thousands of ranks.
    const Key key{static_cast<int>(c.op), c.group, c.bytes[0] / c.calls, c.bytes[1] / c.calls, c.elements / c.calls};
    auto it = models_.find(key);
    if (it == models_.end()) it = models_.emplace(key, model_planned_call(c, e.members, rank, l_)).first;
    const coll::CollectiveModel& m = it->second;
    for (std::int64_t i = 0; i < c.calls; ++i) {
      double start = at;
      if (m.intra_busy_s > 0) start = std::max(start, links_.intra_free);
      if (m.nic_busy_s > 0) start = std::max(start, links_.nic_free);
      if (m.intra_busy_s > 0) links_.intra_free = start + m.intra_busy_s;
      if (m.nic_busy_s > 0) links_.nic_free = start + m.nic_busy_s;
      at = start + m.duration_s;
      s_.comm_time_s += m.duration_s;
    }
    const auto op = static_cast<std::size_t>(c.op);
    for (std::size_t lv = 0; lv < coll::kNumLinkLevels; ++lv)
      if (c.bytes[lv] > 0) {
        s_.count[op][lv] += c.calls;
        s_.bytes[op][lv] += static_cast<std::int64_t>(c.bytes[lv]);
        s_.time_s[op][lv] += m.duration_s * static_cast<double>(c.calls);
      }
    return at;
  }

  const schedulers::StepDescription& d_;
  const UnitTimes& t_;
  const SimulatorLinks& l_;
  SimulatedStep s_;
  Links links_;
  using Key = std::tuple<int, std::string, std::uint64_t, std::uint64_t, std::int64_t>;
  std::map<Key, coll::CollectiveModel> models_;
  double params_free_ = 0, gradients_free_ = 0;
};

}  // namespace

coll::CollectiveModel model_planned_call(const schedulers::PlannedCollective& c, const std::vector<int>& members,
                                         int world_rank, const SimulatorLinks& l) {
  const int p = static_cast<int>(members.size());
  if (p <= 1 || c.calls == 0) return {};
  const int me = static_cast<int>(std::find(members.begin(), members.end(), world_rank) - members.begin());
  HZP_CHECK(me < p, "simulate: rank ", world_rank, " is not in group ", c.group);
  const int rpn = l.ranks_per_node > 0 ? l.ranks_per_node : 1 << 30;
  std::vector<int> node_of(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) node_of[static_cast<std::size_t>(q)] = members[static_cast<std::size_t>(q)] / rpn;
  // The algorithm's rounds (docs/collectives.md): rings of p − 1 steps (all-reduce: 2(p − 1)) above the small-message
  // threshold, log2 p rounds of the latency-optimal ones below it. Each member sends the rank's own bytes per call,
  // spread evenly over the rounds, to its ring successor (latency-optimal: to the member 2^k ahead).
  const std::int64_t per_call = c.elements / c.calls;
  const bool small =
      coll::algbw_bytes(c.op, static_cast<std::size_t>(std::max<std::int64_t>(per_call, 0)), c.dtype, p) <
      l.small_message_bytes;
  const bool ring = !small && c.op != CollOp::all_to_all && c.op != CollOp::all_to_allv;
  const int rounds = ring ? (c.op == CollOp::all_reduce ? 2 * (p - 1) : p - 1) : std::max(ceil_log2(p), 1);
  const double sent = static_cast<double>(c.bytes[0] + c.bytes[1]) / static_cast<double>(c.calls);
  const auto per_round = static_cast<std::uint64_t>(std::llround(sent / rounds));
  // A ring's rounds are all alike: one is modelled and counted `rounds` times (O(p) instead of O(p²) per call).
  const int modelled = ring ? 1 : rounds;
  std::vector<std::vector<coll::RoundLoad>> loads(static_cast<std::size_t>(p),
                                                   std::vector<coll::RoundLoad>(static_cast<std::size_t>(modelled)));
  for (int q = 0; q < p; ++q)
    for (int k = 0; k < modelled; ++k) {
      const int to = ring ? (q + 1) % p : (q + (1 << (k % std::max(ceil_log2(p), 1)))) % p;
      coll::RoundLoad& r = loads[static_cast<std::size_t>(q)][static_cast<std::size_t>(k)];
      if (node_of[static_cast<std::size_t>(q)] == node_of[static_cast<std::size_t>(to)]) {
        r.intra_bytes = per_round;
        r.intra_messages = 1;
      } else {
        r.inter_bytes = per_round;
        r.inter_messages = 1;
      }
    }
  // The node's interface is shared (docs/collectives.md): the copies of this group that the node's other ranks
  // belong to run the same call at the same time in a data-parallel step, so the interface carries k copies'
  // traffic one after the other (the emulator's reservations queue them) and the last copy ends (k − 1) interface
  // times later. The model charges the group's lowest rank on the node; here every rank holds the node's clock.
  int leader = me, local = 0;
  for (int q = 0; q < p; ++q)
    if (node_of[static_cast<std::size_t>(q)] == node_of[static_cast<std::size_t>(me)]) {
      leader = std::min(leader, q);
      ++local;
    }
  const double times = ring ? rounds : 1;
  coll::CollectiveModel m = coll::model_collective(l.links, loads, node_of, me);
  m.duration_s *= times;
  m.intra_busy_s *= times;
  const double nic = times * coll::model_collective(l.links, loads, node_of, leader).nic_busy_s;
  const int copies = l.ranks_per_node > 0 ? (l.ranks_per_node + local - 1) / local : 1;
  m.nic_busy_s = copies * nic;
  m.duration_s += (copies - 1) * nic;
  return m;
}

SimulatedStep simulate_step(const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& links) {
  return Simulation(d, t, links).run();
}

}  // namespace hzp::harness
