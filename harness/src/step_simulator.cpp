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

// What the ranks simulated together tell each other: the arrival of each pipeline message at its receiver, and
// each rank's join of a collective over several of them.
struct Exchange {
  // (receiver world rank, action kind, micro-batch, boundary unit) -> arrival
  std::map<std::tuple<int, int, int, int>, double> messages;
  // (group name, the group's n-th call on the rank) -> join time per rank
  std::map<std::pair<std::string, int>, std::map<int, double>> joins;
  std::int64_t posts = 0;  // messages and joins posted so far: whether a pass moved anything
};

class Simulation {
 public:
  Simulation(const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& l, std::vector<int> together)
      : d_(d), t_(t), l_(l), together_(std::move(together)) {
    const int shard = std::max(d_.model_tp, 1) * std::max(d_.model_cp, 1);
    scale_ = 1.0 / shard;
    const auto calls = d_.calls.size();
    before_.resize(calls);
    after_.resize(calls);
    inside_.resize(calls);
    params_.resize(calls);
    for (const StepEvent& e : d_.events) {
      const bool p2p = e.collective.op == CollOp::send || e.collective.op == CollOp::recv;
      if (p2p && e.stream != CommStream::pipeline && e.stream != CommStream::ring)
        HZP_THROW(UnsupportedError, "simulate: point-to-point calls outside a pipeline or a ring (", e.collective.when,
                  ") are not simulated");
      if (e.stream == CommStream::ring && e.collective.op == CollOp::recv) continue;  // the sender is charged
      if (e.place == CommPlace::step_start) {
        starting_.push_back(&e);
        continue;
      }
      if (e.call < 0) {
        (e.stream == CommStream::gradients ? end_gradients_ : e.stream == CommStream::params ? end_params_ : end_compute_)
            .push_back(&e);
        continue;
      }
      const auto c = static_cast<std::size_t>(e.call);
      if (e.stream == CommStream::params)
        params_[c].push_back(&e);
      else if (e.stream == CommStream::ring || e.place == CommPlace::inside_unit)
        inside_[c].push_back(&e);
      else if (e.stream == CommStream::gradients || e.place == CommPlace::after_unit)
        after_[c].push_back(&e);
      else
        before_[c].push_back(&e);
    }
    // The params stream: the step end's refresh first (steady state: the previous step's, issued before this
    // step's first gather), then each gathering unit call's gathers in order.
    for (const StepEvent* e : end_params_) params_free_ = run_call(*e, params_free_);
    for (std::size_t c = 0; c < calls; ++c)
      if (!params_[c].empty()) gathering_.push_back(static_cast<int>(c));
    gathered_.assign(calls, 0.0);
    // What was queued at the step's start (asynchzp's refreshes, on the gradients stream) runs from 0 in declaration
    // order; the unit call it is declared at gathers (or, gathering nothing, computes) once it is done; declared at
    // the step end, all of it comes before the first gathering call.
    ready_.assign(calls, 0.0);
    for (const StepEvent* e : starting_) {
      HZP_CHECK(e->stream == CommStream::gradients, "simulate: only the gradients stream is queued at the step's start");
      gradients_free_ = run_call(*e, gradients_free_);
      const int at = e->call >= 0 ? e->call : gathering_.empty() ? 0 : gathering_.front();
      if (static_cast<std::size_t>(at) < calls) ready_[static_cast<std::size_t>(at)] = gradients_free_;
    }
  }

  // Runs until the step ends (true) or a wait on another rank that has not got there yet (false: call again
  // once the others moved on).
  bool advance(Exchange& x) {
    const auto calls = static_cast<int>(d_.calls.size());
    while (c_ < calls) {
      const auto ci = static_cast<std::size_t>(c_);
      const auto& [action, unit] = d_.calls[ci];
      switch (phase_) {
        case Phase::enter:
          wait_until(ready_[ci], s_.exposed_comm_s);  // a unit that gathers nothing still reads its refreshed shard
          if (k_ < gathering_.size() && gathering_[k_] == c_) {
            // Compute reaches the unit: the params stream may now run up to prefetch gathering calls beyond it.
            issue_up_to(k_ + static_cast<std::size_t>(d_.prefetch), now_);
            wait_until(gathered_[ci], s_.exposed_comm_s);
            ++k_;
          }
          phase_ = Phase::before;
          i_ = 0;
          [[fallthrough]];
        case Phase::before:
          for (; i_ < before_[ci].size(); ++i_)
            if (!blocking(*before_[ci][i_], x)) return false;
          compute(action, unit, inside_[ci]);
          phase_ = Phase::after;
          i_ = 0;
          [[fallthrough]];
        case Phase::after:
          for (; i_ < after_[ci].size(); ++i_) {
            const StepEvent& e = *after_[ci][i_];
            if (e.stream == CommStream::gradients) {
              gradients_free_ = run_call(e, std::max(gradients_free_, now_));
            } else if (e.stream == CommStream::pipeline && e.collective.op == CollOp::send) {
              // Started without waiting; its arrival is what the peer stage's receive waits for.
              const double done = run_call(e, now_);
              sends_free_ = std::max(sends_free_, done);
              x.messages[message_key(e, action, unit, true)] = done;
              ++x.posts;
            } else if (!blocking(e, x)) {
              return false;
            }
          }
          phase_ = Phase::enter;
          ++c_;
          break;
        default: break;
      }
    }
    if (phase_ == Phase::enter) {
      issue_up_to(gathering_.size(), now_);
      for (const StepEvent* e : end_gradients_) gradients_free_ = run_call(*e, std::max(gradients_free_, now_));
      wait_until(sends_free_, s_.pipeline_wait_s);  // the stage's own sends drain before the stages meet
      phase_ = Phase::end;
      i_ = 0;
    }
    // The step end in declaration order; the gradients stream drains before the first call off the pipeline stream
    // (the stages meet in the losses' sum before the engine's finish_step).
    for (; i_ < end_compute_.size(); ++i_) {
      const StepEvent& e = *end_compute_[i_];
      if (e.stream != CommStream::pipeline && !drained_) {
        wait_until(gradients_free_, s_.exposed_comm_s);
        drained_ = true;
      }
      if (!blocking(e, x)) return false;
    }
    if (!drained_) wait_until(gradients_free_, s_.exposed_comm_s);
    drained_ = true;
    s_.compute_s = s_.forward_s + s_.backward_s;
    s_.step_s = now_;
    return true;
  }

  const SimulatedStep& result() const { return s_; }
  int rank() const { return d_.plan.rank; }
  std::string where() const {
    return "rank " + std::to_string(d_.plan.rank) + " at unit call " + std::to_string(c_) + " of " +
           std::to_string(d_.calls.size()) + ", phase " + std::to_string(static_cast<int>(phase_)) + ", event " +
           std::to_string(i_);
  }

 private:
  enum class Phase { enter, before, after, end };

  // The compute thread waits for `until`; the wait is charged to `what` (exposed communication or pipeline wait).
  void wait_until(double until, double& what) {
    if (until > now_) {
      what += until - now_;
      now_ = until;
    }
  }

  // The pipeline message a send delivers or a receive waits for: (receiver, direction, micro-batch, boundary unit).
  std::tuple<int, int, int, int> message_key(const StepEvent& e, const schedulers::Action& a, int u, bool send) const {
    const bool fwd = a.kind == schedulers::Action::Kind::forward;
    const int to = send ? e.members.at(static_cast<std::size_t>(e.peer)) : rank();
    const int boundary = fwd == send ? u + 1 : u;  // a forward's output / a backward's input: the unit above
    return {to, fwd ? 0 : 1, a.micro_batch, boundary};
  }

  // A call the compute thread waits for: a receive (its message), a collective (its peers among the ranks simulated
  // together joining, then its duration). False when another rank has yet to get there.
  bool blocking(const StepEvent& e, Exchange& x) {
    const bool pipeline = e.stream == CommStream::pipeline;
    double& waits = pipeline ? s_.pipeline_wait_s : s_.exposed_comm_s;
    if (e.collective.op == CollOp::recv) {
      const auto& [a, u] = d_.calls.at(static_cast<std::size_t>(e.call));
      const auto it = x.messages.find(message_key(e, a, u, false));
      if (it == x.messages.end()) return false;
      wait_until(it->second, waits);
      return true;
    }
    int local = 0;
    for (int m : e.members)
      if (std::find(together_.begin(), together_.end(), m) != together_.end()) ++local;
    if (local > 1) {
      if (!joined_) {
        join_key_ = {e.collective.group, occurrence_[e.collective.group]++};
        x.joins[join_key_][rank()] = now_;
        ++x.posts;
        joined_ = true;
      }
      const std::map<int, double>& j = x.joins[join_key_];
      if (static_cast<int>(j.size()) < local) return false;
      double last = now_;
      for (const auto& [r, t] : j) last = std::max(last, t);
      if (!pipeline && last > now_) s_.join_wait_s += last - now_;
      wait_until(last, waits);
      joined_ = false;
    }
    wait_until(run_call(e, now_), waits);
    return true;
  }

  // The unit's compute (its shard's share of the calibration's time) with what runs inside it: the model's own
  // collectives between equal slices of the non-attention part, and the ring's steps, each overlapping one attention
  // block with the messages posted before it and waiting for them and those sent after it. Expert parallelism's
  // all-to-alls (group "ep") wrap the routed experts' share of the time instead (expert_calls).
  void compute(const schedulers::Action& action, int unit, const std::vector<const StepEvent*>& inside) {
    const bool fwd = action.kind == schedulers::Action::Kind::forward;
    const auto u = static_cast<std::size_t>(unit);
    const double dt = (fwd ? t_.forward_s : t_.backward_s).at(u) * scale_;
    (fwd ? s_.forward_s : s_.backward_s) += dt;
    const StepEvent *ring_before = nullptr, *ring_after = nullptr;
    std::vector<std::pair<const StepEvent*, std::int64_t>> between;  // each call of the inside collectives
    std::vector<const StepEvent*> experts;                            // each call of the ep all-to-alls, in order
    for (const StepEvent* e : inside) {
      if (e->stream == CommStream::ring)
        (e->place == CommPlace::after_unit ? ring_after : ring_before) = e;
      else if (e->collective.group == "ep")
        for (std::int64_t i = 0; i < e->collective.calls; ++i) experts.push_back(e);
      else
        for (std::int64_t i = 0; i < e->collective.calls; ++i) between.emplace_back(e, i);
    }
    const double expert = experts.empty() || u >= t_.expert_share.size() ? 0.0 : dt * t_.expert_share[u];
    // The MoE layer follows the attention in a block: forward runs the rest of the unit, then the exchange around the
    // experts; backward the exchange first, then the rest.
    if (!fwd) expert_calls(experts, expert, fwd);
    const double rest = dt - expert;
    const bool ring = ring_before != nullptr && ring_before->blocks > 0;
    const double attention = ring && u < t_.attention_share.size() ? std::min(dt * t_.attention_share[u], rest) : 0.0;
    const double slice = (rest - attention) / static_cast<double>(between.size() + 1);
    const std::size_t ring_at = between.size() / 2;  // attention sits mid-unit, between the projections
    for (std::size_t i = 0; i <= between.size(); ++i) {
      now_ += slice;
      if (ring && i == ring_at) ring_steps(*ring_before, ring_after, attention);
      if (i < between.size()) wait_until(run_call(*between[i].first, now_, 1), s_.exposed_comm_s);
    }
    if (fwd) expert_calls(experts, expert, fwd);
  }

  // What moe_expert_parallel.cpp does on the compute thread, each call blocking: a forward pass exchanges the row
  // counts (all_to_all), dispatches the rows (all_to_allv), runs the rank's experts and combines (all_to_allv); a
  // backward pass sends the outputs' gradients where the rows went, runs the experts' backward and returns the inputs'
  // gradients. A backward unit under recompute holds a forward pass first (its counts call says so), which takes a
  // third of the experts' time (the forward's share of forward + backward), the backward pass the rest.
  void expert_calls(const std::vector<const StepEvent*>& calls, double expert, bool fwd) {
    if (calls.empty()) return;
    const bool rerun = !fwd && std::any_of(calls.begin(), calls.end(),
                                           [](const StepEvent* e) { return e->collective.op == CollOp::all_to_all; });
    bool forward_pass = fwd, dispatched = false;
    for (const StepEvent* e : calls) {
      if (e->collective.op == CollOp::all_to_all) forward_pass = true;
      wait_until(run_call(*e, now_, 1), s_.exposed_comm_s);
      if (e->collective.op != CollOp::all_to_allv) continue;
      if (!dispatched) now_ += !rerun ? expert : forward_pass ? expert / 3 : 2 * expert / 3;
      dispatched = !dispatched;
      if (!dispatched) forward_pass = false;  // a pass ends with its second exchange
    }
  }

  void ring_steps(const StepEvent& before, const StepEvent* after, double attention) {
    const int blocks = before.blocks, with_before = before.rounds;
    const int passes = std::max(blocks - with_before, 1), cp = blocks / passes;
    const std::int64_t per_before = with_before > 0 ? before.collective.calls / with_before : 0;
    const int with_after = after != nullptr ? after->rounds : 0;
    const std::int64_t per_after = with_after > 0 ? after->collective.calls / with_after : 0;
    const double block = attention / blocks;
    for (int r = 0; r < blocks; ++r) {
      double done = now_;
      if (r % cp != cp - 1 && per_before > 0) done = run_call(before, now_, per_before);
      now_ += block;
      if (r >= blocks - with_after && per_after > 0) done = std::max(done, run_call(*after, now_, per_after));
      wait_until(done, s_.exposed_comm_s);
    }
  }

  void issue_up_to(std::size_t k_last, double gate) {
    for (; issued_ < gathering_.size() && issued_ <= k_last; ++issued_) {
      const auto c = static_cast<std::size_t>(gathering_[issued_]);
      double at = std::max({params_free_, gate, ready_[c]});
      for (const StepEvent* e : params_[c]) at = run_call(*e, at);
      params_free_ = at;
      gathered_[c] = at;
    }
  }

  // `n` calls of e (all of them when negative) issued at `at` on the rank's links, one after the other; returns when
  // the last completes.
  double run_call(const StepEvent& e, double at, std::int64_t n = -1) {
    const schedulers::PlannedCollective& c = e.collective;
    if (n < 0) n = c.calls;
    if (c.calls == 0 || n == 0) return at;
    // A step repeats few distinct calls (per unit, per micro-batch): each is modelled once, which keeps a
    // world-sized ring's O(p²) rounds affordable at thousands of ranks.
    const Key key{static_cast<int>(c.op), c.group, c.bytes[0] / c.calls, c.bytes[1] / c.calls, c.elements / c.calls, e.peer};
    auto it = models_.find(key);
    if (it == models_.end()) it = models_.emplace(key, model_event(e)).first;
    const coll::CollectiveModel& m = it->second;
    for (std::int64_t i = 0; i < n; ++i) {
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
        s_.count[op][lv] += n;
        s_.bytes[op][lv] += static_cast<std::int64_t>(c.bytes[lv] / static_cast<std::uint64_t>(c.calls)) * n;
        s_.time_s[op][lv] += m.duration_s * static_cast<double>(n);
      }
    return at;
  }

  coll::CollectiveModel model_event(const StepEvent& e) const {
    if (e.collective.op != CollOp::send) return model_planned_call(e.collective, e.members, rank(), l_);
    return model_message(e.collective, e.members, rank(), e.peer, l_);
  }

  const schedulers::StepDescription& d_;
  const UnitTimes& t_;
  const SimulatorLinks& l_;
  std::vector<int> together_;
  double scale_ = 1;
  std::vector<std::vector<const StepEvent*>> before_, after_, inside_, params_;
  std::vector<const StepEvent*> end_compute_, end_gradients_, end_params_;
  std::vector<const StepEvent*> starting_;  // queued at the step's start (CommPlace::step_start)
  std::vector<double> ready_;               // per unit call: when what it waits for from the step's start is done
  std::vector<int> gathering_;
  std::vector<double> gathered_;
  std::size_t issued_ = 0, k_ = 0, i_ = 0;  // gathering calls placed; the next one compute consumes; event index
  int c_ = 0;
  Phase phase_ = Phase::enter;
  double now_ = 0;
  bool joined_ = false, drained_ = false;
  std::pair<std::string, int> join_key_;
  std::map<std::string, int> occurrence_;
  SimulatedStep s_;
  Links links_;
  using Key = std::tuple<int, std::string, std::uint64_t, std::uint64_t, std::int64_t, int>;
  std::map<Key, coll::CollectiveModel> models_;
  double params_free_ = 0, gradients_free_ = 0, sends_free_ = 0;
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
  const int copies = l.ranks_per_node > 0 && !l.nic_per_rank ? (l.ranks_per_node + local - 1) / local : 1;
  m.nic_busy_s = copies * nic;
  m.duration_s += (copies - 1) * nic;
  return m;
}

coll::CollectiveModel model_message(const schedulers::PlannedCollective& c, const std::vector<int>& members,
                                    int world_rank, int peer, const SimulatorLinks& l) {
  coll::CollectiveModel m;
  if (c.calls == 0) return m;
  const int rpn = l.ranks_per_node > 0 ? l.ranks_per_node : 1 << 30;
  const int to = members.at(static_cast<std::size_t>(peer));
  const auto bytes = (c.bytes[0] + c.bytes[1]) / static_cast<std::uint64_t>(c.calls);
  if (world_rank / rpn == to / rpn) {
    m.duration_s = m.intra_busy_s = l.links.intra.seconds(bytes);
    return m;
  }
  // The node's interface carries the same message of every rank of the node whose group runs it at the same time
  // (the data-parallel copies of a stage or ring), one after the other, as model_planned_call's copies.
  int local = 0;
  for (int q : members)
    if (q / rpn == world_rank / rpn) ++local;
  const int copies = l.ranks_per_node > 0 && !l.nic_per_rank ? (l.ranks_per_node + local - 1) / local : 1;
  const double one = l.links.inter.seconds(bytes);
  m.nic_busy_s = m.duration_s = copies * one;
  return m;
}

SimulatedStep simulate_step(const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& links) {
  return simulate_steps({&d}, t, links).front();
}

std::vector<SimulatedStep> simulate_steps(const std::vector<const schedulers::StepDescription*>& ranks,
                                          const UnitTimes& t, const SimulatorLinks& links) {
  std::vector<int> together;
  for (const schedulers::StepDescription* d : ranks) together.push_back(d->plan.rank);
  std::vector<Simulation> sims;
  sims.reserve(ranks.size());
  for (const schedulers::StepDescription* d : ranks) sims.emplace_back(*d, t, links, together);
  Exchange x;
  std::vector<bool> done(sims.size(), false);
  // Each rank runs as far as it can; a pass in which no rank moves while some are not done is a cycle of waits.
  for (std::size_t left = sims.size(); left > 0;) {
    bool moved = false;
    for (std::size_t i = 0; i < sims.size(); ++i) {
      if (done[i]) continue;
      const std::string before = sims[i].where();
      const std::int64_t posts = x.posts;
      if (sims[i].advance(x)) {
        done[i] = true;
        --left;
        moved = true;
      } else if (sims[i].where() != before || x.posts != posts) {
        moved = true;
      }
    }
    if (!moved && left > 0) {
      std::string stuck;
      for (std::size_t i = 0; i < sims.size(); ++i)
        if (!done[i]) stuck += "\n  " + sims[i].where();
      HZP_THROW(PreconditionError, "simulate: the ranks wait on each other and none can move:", stuck);
    }
  }
  std::vector<SimulatedStep> out;
  for (const Simulation& s : sims) out.push_back(s.result());
  return out;
}

}  // namespace hzp::harness
