// The discrete-event model of one rank's step (step_simulator.hpp). Times start at 0 with the step; each
// stream is a busy-until clock; each link level of the rank keeps its calls' bookings (link_book.hpp, the rule
// LinkEmulator books by).
#include "hzp/harness/step_simulator.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>

#include "hzp/collectives/link_book.hpp"
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

// The position in `members` of the member that reserves world_rank's node interface for the group's copy there
// (NodeInterface::shared): the group's first member on that node. rpn <= 0: every rank on one node.
int copy_leader(const std::vector<int>& members, int world_rank, int rpn) {
  if (rpn <= 0) return 0;
  for (std::size_t q = 0; q < members.size(); ++q)
    if (members[q] / rpn == world_rank / rpn) return static_cast<int>(q);
  HZP_THROW(PreconditionError, "simulate: rank ", world_rank, "'s node holds no member of its group");
}

// The rank's two link levels: a call starts at the earliest time at or after its issue when every level it uses
// has a gap that fits it (streams book out of time order: a call issued later may take an earlier gap). The
// interface's bookings are the rank's own, or its node's when the node's ranks are simulated together
// (NodeInterface::shared).
struct Links {
  coll::LinkBook<double> intra, own_nic;
  coll::LinkBook<double>* nic = &own_nic;
};

// One collective over several of the ranks simulated together: how many joined, the last join, who has read it
// (the entry goes once every member has), and the ranks waiting for the rest.
struct Join {
  int joined = 0, read = 0;
  double last = 0;
  std::vector<int> waiters;
};

// What the ranks simulated together tell each other: the arrival of each pipeline message at its receiver, and
// each rank's join of a collective over several of them; and which simulations may move again (a rank waiting on
// another is woken by the post it waits for, so the cost is the events', not passes over every rank).
struct Exchange {
  using MessageKey = std::tuple<int, int, int, int>;  // (receiver world rank, action kind, micro-batch, boundary unit)
  using JoinKey = std::tuple<std::string, int, int>;  // (group name, its lowest member, the group's n-th call on the rank)
  std::map<MessageKey, double> messages;               // -> arrival
  std::map<MessageKey, int> listening;                 // -> the receiver's simulation, waiting for it
  std::map<JoinKey, Join> joins;
  std::deque<int> runnable;
  // In time order (NodeInterface::shared): the simulations that may move, each under a time it will not reserve a
  // link before (a woken one: its clock; one that yielded: the time of the call it is about to start).
  bool ordered = false;
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> queue;
  std::vector<const double*> clock;  // per simulation: its compute thread's time

  void wake(int id) {
    if (ordered)
      queue.emplace(*clock[static_cast<std::size_t>(id)], id);
    else
      runnable.push_back(id);
  }

  // Whether simulation `id` may start a call at `t` now: in time order, not while another may still start one
  // earlier (then it waits its turn under t). A node's interface is one list of bookings that the emulator's ranks
  // fill in the order of their calls' times; simulations that each ran ahead would book it in another order.
  bool turn(int id, double t) {
    if (!ordered || queue.empty() || !(queue.top().first < t)) return true;
    queue.emplace(t, id);
    return false;
  }

  void post(const MessageKey& k, double arrival) {
    messages[k] = arrival;
    const auto it = listening.find(k);
    if (it == listening.end()) return;
    wake(it->second);
    listening.erase(it);
  }
};

// A call's modelled duration, by (op, group, bytes per call intra and inter, elements per call, peer, the node
// interface's use: Simulation::interface_use): a step repeats few distinct calls, and ranks of one description (a
// role) share them; a role's key does not tell which of its ranks lead their node's copy, so this key does.
using ModelKey = std::tuple<int, std::string, std::uint64_t, std::uint64_t, std::int64_t, int, int>;
using Models = std::map<ModelKey, coll::CollectiveModel>;

// Per group (its members' vector): how many of its members are simulated together, and its lowest member.
using GroupsTogether = std::unordered_map<const std::vector<int>*, std::pair<int, int>>;

class Simulation {
 public:
  // `together`: which world ranks are simulated with this one, and `groups` what each group holds of them (shared by
  // the simulations); `factor`: each local micro-batch's attention factor (empty: 1); `own`: the rank's groups where d
  // is its role's description (nullptr: its own); `models`: the durations of d's calls; `join_streams`: the params and
  // gradients streams' calls join too (else only the compute thread's). `nic`: the node interface's bookings when the
  // rank's node is simulated with it (null: its own, with the node's copies).
  Simulation(int id, const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& l,
             const std::vector<char>& together, GroupsTogether& groups, const std::vector<double>& factor,
             const RankGroups* own, Models& models, bool join_streams, coll::LinkBook<double>* nic)
      : id_(id), d_(d), t_(t), l_(l), together_(together), groups_(groups), factor_(factor), own_(own),
        models_(models), join_streams_(join_streams), node_simulated_(nic != nullptr) {
    if (nic != nullptr) links_.nic = nic;
    const int shard = std::max(d_.model_tp, 1) * std::max(d_.model_cp, 1);
    scale_ = 1.0 / shard;
    const auto calls = d_.calls.size();
    receives_.resize(calls);
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
      else if (e.stream == CommStream::pipeline && e.collective.op == CollOp::recv)
        receives_[c].push_back(&e);
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
        case Phase::receive:
          // The params stream starts the step with its first `prefetch` gathering calls queued (AsyncComm::begin_step);
          // the stage's input arrives before the unit asks the engine for its parameters (PipelineStage::run), so the
          // window moves on only after it.
          if (d_.prefetch > 0 && !issue_up_to(static_cast<std::size_t>(d_.prefetch) - 1, 0.0, x)) return false;
          for (; i_ < receives_[ci].size(); ++i_)
            if (!blocking(*receives_[ci][i_], x)) return false;
          phase_ = Phase::enter;
          i_ = 0;
          [[fallthrough]];
        case Phase::enter:
          wait_until(ready_[ci], s_.exposed_comm_s);  // a unit that gathers nothing still reads its refreshed shard
          if (k_ < gathering_.size() && gathering_[k_] == c_) {
            // Compute reaches the unit: the params stream may now run up to prefetch gathering calls beyond it.
            if (!issue_up_to(k_ + static_cast<std::size_t>(d_.prefetch), now_, x)) return false;
            wait_stream(gathered_[ci], params_idle_);
            ++k_;
          }
          phase_ = Phase::before;
          i_ = 0;
          [[fallthrough]];
        case Phase::before:
          for (; i_ < before_[ci].size(); ++i_) {
            if (!x.turn(id_, now_)) return false;
            if (!blocking(*before_[ci][i_], x)) return false;
          }
          if (!inside_[ci].empty() && !x.turn(id_, now_)) return false;
          compute(action, unit, inside_[ci]);
          phase_ = Phase::after;
          i_ = 0;
          [[fallthrough]];
        case Phase::after:
          for (; i_ < after_[ci].size(); ++i_) {
            const StepEvent& e = *after_[ci][i_];
            if (!x.turn(id_, e.stream == CommStream::gradients ? std::max(gradients_free_, now_) : now_)) return false;
            if (e.stream == CommStream::gradients) {
              double start = 0;
              if (!stream_join(e, std::max(gradients_free_, now_), x, start, gradients_idle_)) return false;
              gradients_free_ = run_call(e, start);
            } else if (e.stream == CommStream::pipeline && e.collective.op == CollOp::send) {
              // Started without waiting; its arrival is what the peer stage's receive waits for.
              const double done = run_call(e, now_);
              sends_free_ = std::max(sends_free_, done);
              x.post(message_key(e, action, unit, true), done);
            } else if (!blocking(e, x)) {
              return false;
            }
          }
          phase_ = Phase::receive;
          i_ = 0;
          ++c_;
          break;
        default: break;
      }
    }
    if (phase_ == Phase::receive) {
      phase_ = Phase::finish;
      i_ = 0;
    }
    if (phase_ == Phase::finish) {
      if (!issue_up_to(gathering_.size(), now_, x)) return false;
      for (; i_ < end_gradients_.size(); ++i_) {
        if (!x.turn(id_, std::max(gradients_free_, now_))) return false;
        double start = 0;
        if (!stream_join(*end_gradients_[i_], std::max(gradients_free_, now_), x, start, gradients_idle_)) return false;
        gradients_free_ = run_call(*end_gradients_[i_], start);
      }
      wait_until(sends_free_, s_.pipeline_wait_s);  // the stage's own sends drain before the stages meet
      phase_ = Phase::end;
      i_ = 0;
    }
    // The step end in declaration order; the gradients stream drains before the first call off the pipeline stream
    // (the stages meet in the losses' sum before the engine's finish_step).
    for (; i_ < end_compute_.size(); ++i_) {
      const StepEvent& e = *end_compute_[i_];
      if (e.stream != CommStream::pipeline && !drained_) {
        wait_stream(gradients_free_, gradients_idle_);
        drained_ = true;
      }
      if (!x.turn(id_, now_)) return false;
      if (!blocking(e, x)) return false;
    }
    if (!drained_) wait_stream(gradients_free_, gradients_idle_);
    drained_ = true;
    s_.compute_s = s_.forward_s + s_.backward_s;
    s_.step_s = now_;
    return true;
  }

  const SimulatedStep& result() const { return s_; }
  int id() const { return id_; }
  const double* clock() const { return &now_; }
  int rank() const { return own_ != nullptr ? own_->rank : d_.plan.rank; }
  std::string where() const {
    return "rank " + std::to_string(rank()) + " at unit call " + std::to_string(c_) + " of " +
           std::to_string(d_.calls.size()) + ", phase " + std::to_string(static_cast<int>(phase_)) + ", event " +
           std::to_string(i_);
  }

 private:
  enum class Phase { receive, enter, before, after, end, finish };
  using Idle = std::deque<std::pair<double, double>>;  // a stream's spans held by a late peer, in time order

  // The compute thread waits for `until`; the wait is charged to `what` (exposed communication or pipeline wait).
  void wait_until(double until, double& what) {
    if (until > now_) {
      what += until - now_;
      now_ = until;
    }
  }

  // The compute thread waits for a stream's call to end: exposed communication, of which the spans the stream sat
  // waiting for a late peer to join one of its calls are join waits.
  void wait_stream(double until, Idle& idle) {
    if (until <= now_) return;
    for (const auto& [a, b] : idle) s_.join_wait_s += std::max(0.0, std::min(b, until) - std::max(a, now_));
    while (!idle.empty() && idle.front().second <= until) idle.pop_front();  // later waits begin after `until`
    wait_until(until, s_.exposed_comm_s);
  }

  // The world ranks of e's group for this rank: the description's, or the rank's own group in the role's slot.
  const std::vector<int>& members(const StepEvent& e) const {
    if (own_ == nullptr) return e.members;
    return own_->members[static_cast<std::size_t>(own_->role->slot[static_cast<std::size_t>(&e - d_.events.data())])];
  }

  // e's peer (send / recv) as a position in members(e): the described rank's peer, at the same distance from this
  // rank (a role's key holds the peer counted from the rank's own position).
  int peer(const StepEvent& e) const {
    if (own_ == nullptr || e.peer < 0) return e.peer;
    const int slot = own_->role->slot[static_cast<std::size_t>(&e - d_.events.data())];
    const std::vector<int>& m = own_->members[static_cast<std::size_t>(slot)];
    const int p = static_cast<int>(m.size());
    const int mine = static_cast<int>(std::find(m.begin(), m.end(), rank()) - m.begin());
    return ((e.peer - own_->role->position[static_cast<std::size_t>(slot)] + mine) % p + p) % p;
  }

  // The members of e's group simulated here, and the group's lowest member (which of the group's copies it is).
  const std::pair<int, int>& group_of(const StepEvent& e) {
    const std::vector<int>& g = members(e);
    auto it = groups_.find(&g);
    if (it != groups_.end()) return it->second;
    int local = 0, lowest = g.empty() ? -1 : g.front();
    for (int m : g) {
      if (m >= 0 && static_cast<std::size_t>(m) < together_.size() && together_[static_cast<std::size_t>(m)]) ++local;
      lowest = std::min(lowest, m);
    }
    return groups_.emplace(&g, std::pair{local, lowest}).first->second;
  }

  // Joins e's collective at `at`: true with `last` the last member's join once all of its members simulated here have
  // joined (at when it has no other), false (waiting on them) before.
  bool join(const StepEvent& e, double at, Exchange& x, double& last) {
    last = at;
    const auto& [local, lowest] = group_of(e);
    if (local <= 1) return true;
    if (!joined_) {
      join_key_ = {e.collective.group, lowest, occurrence_[e.collective.group]++};
      Join& j = x.joins[join_key_];
      ++j.joined;
      j.last = j.joined == 1 ? at : std::max(j.last, at);
      if (j.joined == local) {
        for (int w : j.waiters) x.wake(w);
        j.waiters.clear();
      }
      joined_ = true;
    }
    const auto it = x.joins.find(join_key_);
    Join& j = it->second;
    if (j.joined < local) {
      j.waiters.push_back(id_);
      return false;
    }
    last = std::max(at, j.last);
    if (++j.read == local) x.joins.erase(it);
    joined_ = false;
    return true;
  }

  // A stream's call issued at `at` starts at `start`: at, or once the last member joined when the streams join; the
  // span a late peer held the stream goes to `idle`.
  bool stream_join(const StepEvent& e, double at, Exchange& x, double& start, Idle& idle) {
    start = at;
    if (!join_streams_) return true;
    if (!join(e, at, x, start)) return false;
    if (start > at) idle.emplace_back(at, start);
    return true;
  }

  // The pipeline message a send delivers or a receive waits for: (receiver, direction, micro-batch, boundary unit).
  std::tuple<int, int, int, int> message_key(const StepEvent& e, const schedulers::Action& a, int u, bool send) const {
    const bool fwd = a.kind == schedulers::Action::Kind::forward;
    const int to = send ? members(e).at(static_cast<std::size_t>(peer(e))) : rank();
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
      const Exchange::MessageKey key = message_key(e, a, u, false);
      const auto it = x.messages.find(key);
      if (it == x.messages.end()) {
        x.listening[key] = id_;
        return false;
      }
      wait_until(it->second, waits);
      return true;
    }
    double last = now_;
    if (!join(e, now_, x, last)) return false;
    if (!pipeline && last > now_) s_.join_wait_s += last - now_;
    wait_until(last, waits);
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
    // Document packing: the micro-batch's attention takes its factor of the unit's attention share; the rest is
    // unchanged (a factor of exactly 1 leaves the unit's time as it was, bit for bit).
    // What every rank takes after the unit whatever its shard (the benchmark hook's sleep) is not the shard's compute.
    const double after = u < t_.after_s.size() ? t_.after_s[u] : 0.0;
    const double base = ((fwd ? t_.forward_s : t_.backward_s).at(u) - after) * scale_;
    const double f = factor(action.micro_batch);
    const double share = u < t_.attention_share.size() ? t_.attention_share[u] : 0.0;
    const double dt = f == 1.0 ? base : base + base * share * (f - 1.0);
    (fwd ? s_.forward_s : s_.backward_s) += dt + after;
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
    const double expert = experts.empty() || u >= t_.expert_share.size() ? 0.0 : base * t_.expert_share[u];
    // The MoE layer follows the attention in a block: forward runs the rest of the unit, then the exchange around the
    // experts; backward the exchange first, then the rest.
    if (!fwd) expert_calls(experts, expert, fwd);
    const double rest = dt - expert;
    const bool ring = ring_before != nullptr && ring_before->blocks > 0;
    const double attention = ring && u < t_.attention_share.size() ? std::min(f == 1.0 ? dt * share : base * share * f, rest) : 0.0;
    const double slice = (rest - attention) / static_cast<double>(between.size() + 1);
    const std::size_t ring_at = between.size() / 2;  // attention sits mid-unit, between the projections
    for (std::size_t i = 0; i <= between.size(); ++i) {
      now_ += slice;
      if (ring && i == ring_at) ring_steps(*ring_before, ring_after, attention);
      if (i < between.size()) wait_until(run_call(*between[i].first, now_, 1), s_.exposed_comm_s);
    }
    if (fwd) expert_calls(experts, expert, fwd);
    now_ += after;  // StepDriver sleeps after the unit's compute (its ring included), before the engine's hook
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

  double factor(int micro_batch) const {
    if (factor_.empty()) return 1.0;
    HZP_CHECK(micro_batch >= 0 && static_cast<std::size_t>(micro_batch) < factor_.size(), "simulate: rank ", rank(),
              " has attention factors for ", factor_.size(), " micro-batches, not micro-batch ", micro_batch);
    return factor_[static_cast<std::size_t>(micro_batch)];
  }

  // The params stream issues gathering calls up to k_last, none before `gate`; false while one of its calls waits
  // for a peer to join (resumed where it stopped).
  bool issue_up_to(std::size_t k_last, double gate, Exchange& x) {
    for (; issued_ < gathering_.size() && issued_ <= k_last; ++issued_) {
      const auto c = static_cast<std::size_t>(gathering_[issued_]);
      if (param_event_ == 0) param_at_ = std::max({params_free_, gate, ready_[c]});
      for (; param_event_ < params_[c].size(); ++param_event_) {
        if (!x.turn(id_, param_at_)) return false;
        double start = 0;
        if (!stream_join(*params_[c][param_event_], param_at_, x, start, params_idle_)) return false;
        param_at_ = run_call(*params_[c][param_event_], start);
      }
      param_event_ = 0;
      params_free_ = param_at_;
      gathered_[c] = param_at_;
    }
    return true;
  }

  // `n` calls of e (all of them when negative) issued at `at` on the rank's links, one after the other; returns when
  // the last completes.
  double run_call(const StepEvent& e, double at, std::int64_t n = -1) {
    const schedulers::PlannedCollective& c = e.collective;
    if (n < 0) n = c.calls;
    if (c.calls == 0 || n == 0) return at;
    // A step repeats few distinct calls (per unit, per micro-batch): each is modelled once, which keeps a
    // world-sized ring's O(p²) rounds affordable at thousands of ranks.
    const ModelKey key{static_cast<int>(c.op), c.group, c.bytes[0] / c.calls, c.bytes[1] / c.calls,
                       c.elements / c.calls, e.peer, interface_use(e)};
    auto it = models_.find(key);
    if (it == models_.end()) it = models_.emplace(key, model_event(e)).first;
    const coll::CollectiveModel& m = it->second;
    // No call of the rank is issued before compute's clock from here on: the streams issue theirs at the later of
    // their last completion and compute reaching the declaration (max(free, now_); joins only delay them), messages
    // and inside calls at now_. So what ended by now_ is of no use to any gap search. (Not the streams' own clocks:
    // an idle stream's stays where its last call ended, 0 for one that never runs, and kept every booking since.)
    // A node's shared interface keeps its bookings: its other ranks may still book before this one's clock.
    links_.intra.forget_before(now_);
    if (links_.nic == &links_.own_nic) links_.own_nic.forget_before(now_);
    for (std::int64_t i = 0; i < n; ++i) {
      const double start = coll::earliest_on_both(links_.intra, m.intra_busy_s, *links_.nic, m.nic_busy_s, at);
      links_.intra.book(start, m.intra_busy_s);
      links_.nic->book(start, m.nic_busy_s);
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

  // How e's call uses the node's interface: 0 with the node's copies (the rank's own clock), on the node's shared
  // clock 2 where the rank reserves it for its group's copy (the group's first member on the node,
  // model_planned_call) and 1 where another member does; asked once per group.
  int interface_use(const StepEvent& e) {
    if (!node_simulated_) return 0;
    if (e.collective.op == CollOp::send) return 1;  // each message is its sender's own (model_message)
    const std::vector<int>& g = members(e);
    const auto [it, fresh] = leads_.try_emplace(&g, false);
    if (fresh) it->second = g[static_cast<std::size_t>(copy_leader(g, rank(), l_.ranks_per_node))] == rank();
    return it->second ? 2 : 1;
  }

  coll::CollectiveModel model_event(const StepEvent& e) const {
    if (e.collective.op != CollOp::send) return model_planned_call(e.collective, members(e), rank(), l_, node_simulated_);
    return model_message(e.collective, members(e), rank(), peer(e), l_, node_simulated_);
  }

  int id_;
  const schedulers::StepDescription& d_;
  const UnitTimes& t_;
  const SimulatorLinks& l_;
  const std::vector<char>& together_;  // by world rank
  GroupsTogether& groups_;             // group_of's answers
  const std::vector<double>& factor_;
  const RankGroups* own_;
  Models& models_;
  bool join_streams_;
  bool node_simulated_;  // the node's other ranks are simulated beside this one, on the same interface clock
  std::unordered_map<const std::vector<int>*, bool> leads_;  // interface_use's leaders, by group
  std::size_t param_event_ = 0;                                       // issue_up_to's place in a call's gathers
  double param_at_ = 0;
  Idle params_idle_, gradients_idle_;
  double scale_ = 1;
  std::vector<std::vector<const StepEvent*>> receives_, before_, after_, inside_, params_;
  std::vector<const StepEvent*> end_compute_, end_gradients_, end_params_;
  std::vector<const StepEvent*> starting_;  // queued at the step's start (CommPlace::step_start)
  std::vector<double> ready_;               // per unit call: when what it waits for from the step's start is done
  std::vector<int> gathering_;
  std::vector<double> gathered_;
  std::size_t issued_ = 0, k_ = 0, i_ = 0;  // gathering calls placed; the next one compute consumes; event index
  int c_ = 0;
  Phase phase_ = Phase::receive;
  double now_ = 0;
  bool joined_ = false, drained_ = false;
  Exchange::JoinKey join_key_;
  std::map<std::string, int> occurrence_;
  SimulatedStep s_;
  Links links_;
  double params_free_ = 0, gradients_free_ = 0, sends_free_ = 0;
};

}  // namespace

coll::CollectiveModel model_planned_call(const schedulers::PlannedCollective& c, const std::vector<int>& members,
                                         int world_rank, const SimulatorLinks& l, bool node_simulated) {
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
  // times later. The model charges the group's lowest rank on the node; here every rank holds the node's clock, unless
  // the node's ranks are simulated together on its one clock: then each copy is reserved by its own leader, once.
  const int leader = copy_leader(members, world_rank, l.ranks_per_node);
  const auto local = static_cast<int>(std::count(node_of.begin(), node_of.end(), node_of[static_cast<std::size_t>(me)]));
  const double times = ring ? rounds : 1;
  coll::CollectiveModel m = coll::model_collective(l.links, loads, node_of, me);
  m.duration_s *= times;
  m.intra_busy_s *= times;
  const double nic = times * coll::model_collective(l.links, loads, node_of, leader).nic_busy_s;
  const int copies =
      l.ranks_per_node > 0 && !l.nic_per_rank && !node_simulated ? (l.ranks_per_node + local - 1) / local : 1;
  m.nic_busy_s = node_simulated && leader != me ? 0.0 : copies * nic;
  m.duration_s += (copies - 1) * nic;
  return m;
}

coll::CollectiveModel model_message(const schedulers::PlannedCollective& c, const std::vector<int>& members,
                                    int world_rank, int peer, const SimulatorLinks& l, bool node_simulated) {
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
  // (the data-parallel copies of a stage or ring), one after the other, as model_planned_call's copies; simulated
  // together on the node's clock, each copy is its own sender's message.
  int local = 0;
  for (int q : members)
    if (q / rpn == world_rank / rpn) ++local;
  const int copies =
      l.ranks_per_node > 0 && !l.nic_per_rank && !node_simulated ? (l.ranks_per_node + local - 1) / local : 1;
  const double one = l.links.inter.seconds(bytes);
  m.nic_busy_s = m.duration_s = copies * one;
  return m;
}

bool node_interface_shared(const SimulatorLinks& l) { return l.ranks_per_node > 0 && !l.nic_per_rank; }

const std::vector<int>* pipeline_members(const schedulers::StepDescription& d) {
  for (const StepEvent& e : d.events)
    if (e.stream == CommStream::pipeline) return &e.members.get();
  return nullptr;
}

SimulatedStep simulate_step(const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& links) {
  return simulate_steps({&d}, t, links).front();
}

namespace {

// Runs `ranks` together until each step ends: every simulation moves as far as it can, then waits to be woken by the
// message or the last join it waits for (the results do not depend on the order: each wait is for a time another
// rank posts; but where ranks share a node's interface clock, its reservations do, so the simulations then move in
// time order, Exchange::turn). A simulation left waiting when nothing can move is a cycle of waits.
std::vector<SimulatedStep> run_together(const std::vector<SimulatedRank>& ranks, const UnitTimes& t,
                                        const SimulatorLinks& links, bool join_streams, NodeInterface nodes) {
  const auto rank_of = [](const SimulatedRank& r) { return r.groups != nullptr ? r.groups->rank : r.description->plan.rank; };
  int world = 0;
  for (const SimulatedRank& r : ranks) world = std::max(world, rank_of(r) + 1);
  std::vector<char> together(static_cast<std::size_t>(world), 0);
  for (const SimulatedRank& r : ranks) together[static_cast<std::size_t>(rank_of(r))] = 1;
  // A node all of whose ranks are here, on a shared interface, gets one list of bookings for them all
  // (NodeInterface::shared).
  const int rpn = links.ranks_per_node;
  const bool shared = nodes == NodeInterface::shared && node_interface_shared(links);
  std::vector<coll::LinkBook<double>> node_interface(shared ? static_cast<std::size_t>((world + rpn - 1) / rpn) : 0);
  std::vector<int> present(node_interface.size(), 0);
  for (const SimulatedRank& r : ranks)
    if (shared) ++present[static_cast<std::size_t>(rank_of(r) / rpn)];
  auto interface_of = [&](const SimulatedRank& r) -> coll::LinkBook<double>* {
    const auto node = shared ? static_cast<std::size_t>(rank_of(r) / rpn) : 0;
    return shared && present[node] == rpn ? &node_interface[node] : nullptr;
  };
  Exchange x;
  for (const SimulatedRank& r : ranks) x.ordered = x.ordered || interface_of(r) != nullptr;
  // Replicas that queue on one interface no longer move alike: their streams' collectives join too (the first to
  // issue one waits for the others), as in simulate_joined.
  join_streams = join_streams || x.ordered;
  GroupsTogether groups;
  // One per description: a role shares its calls' durations (ModelKey tells its ranks that lead a node's copy apart).
  std::unordered_map<const schedulers::StepDescription*, Models> models;
  std::vector<Simulation> sims;
  sims.reserve(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    sims.emplace_back(static_cast<int>(i), *ranks[i].description, t, links, together, groups, ranks[i].attention_factor,
                      ranks[i].groups, models[ranks[i].description], join_streams, interface_of(ranks[i]));
  }
  for (const Simulation& s : sims) x.clock.push_back(s.clock());
  std::vector<bool> done(sims.size(), false);
  for (std::size_t i = 0; i < sims.size(); ++i) x.wake(static_cast<int>(i));
  for (;;) {
    std::size_t i = 0;
    if (x.ordered) {
      if (x.queue.empty()) break;
      i = static_cast<std::size_t>(x.queue.top().second);
      x.queue.pop();
    } else {
      if (x.runnable.empty()) break;
      i = static_cast<std::size_t>(x.runnable.front());
      x.runnable.pop_front();
    }
    if (!done[i]) done[i] = sims[i].advance(x);
  }
  std::string stuck;
  for (std::size_t i = 0; i < sims.size(); ++i)
    if (!done[i]) stuck += "\n  " + sims[i].where();
  if (!stuck.empty()) HZP_THROW(PreconditionError, "simulate: the ranks wait on each other and none can move:", stuck);
  std::vector<SimulatedStep> out;
  out.reserve(sims.size());
  for (const Simulation& s : sims) out.push_back(s.result());
  return out;
}

}  // namespace

std::vector<SimulatedStep> simulate_steps(const std::vector<const schedulers::StepDescription*>& ranks,
                                          const UnitTimes& t, const SimulatorLinks& links, NodeInterface nodes) {
  std::vector<SimulatedRank> rs;
  rs.reserve(ranks.size());
  for (const schedulers::StepDescription* d : ranks) rs.push_back({d, {}});
  return run_together(rs, t, links, false, nodes);
}

std::vector<SimulatedStep> simulate_joined(const std::vector<SimulatedRank>& ranks, const UnitTimes& t,
                                           const SimulatorLinks& links, NodeInterface nodes) {
  return run_together(ranks, t, links, true, nodes);
}

}  // namespace hzp::harness
