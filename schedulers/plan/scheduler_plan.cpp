// The plan from an engine's declaration (step/engine_plan.hpp): the driver's schedule walked over the
// engine's per-unit and step-end declarations, and each declared call's bytes per link level for one rank,
// following the MPI backend's algorithm choice (docs/collectives.md "Bytes per level"): ring above
// collectives.small_message_bytes, Bruck all-gather / direct reduce-scatter / recursive-doubling all-reduce
// below it. Nothing here knows a scheduler: each engine's declaration lives in its own file.
#include "hzp/schedulers/plan.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "hzp/core/error.hpp"
#include "hzp/core/json_text.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "plan/activation_plan.hpp"

namespace hzp::schedulers {
namespace {

using coll::CollOp;
using coll::LinkLevel;

// One rank's view of a group: the world ranks of its members in position order and its own position.
struct Geometry {
  const std::vector<int>* members = nullptr;
  int pos = 0;
  int rpn = 0;
  int size() const { return static_cast<int>(members->size()); }
  int level_to(int peer_pos) const {
    if (rpn <= 0) return static_cast<int>(LinkLevel::intra);
    const bool same = (*members)[static_cast<std::size_t>(pos)] / rpn == (*members)[static_cast<std::size_t>(peer_pos)] / rpn;
    return static_cast<int>(same ? LinkLevel::intra : LinkLevel::inter);
  }
};

// The rank's position in each group it declares calls on, found once per group: a step declares many calls on a
// few groups, some of thousands of ranks. Keyed by the shared vector, which the cache holds so that it stays alive.
class Positions {
 public:
  explicit Positions(int rank) : rank_(rank) {}
  int of(const GroupMembers& m) {
    for (const auto& [g, pos] : seen_)
      if (g.same(m)) return pos;
    const int pos = static_cast<int>(std::find(m.begin(), m.end(), rank_) - m.begin());
    if (seen_.size() >= 64) seen_.clear();  // groups made afresh per call (world_plan_group) would pile up
    seen_.emplace_back(m, pos);
    return pos;
  }

 private:
  int rank_;
  std::vector<std::pair<GroupMembers, int>> seen_;
};

std::size_t acc_size(DType t) { return t == DType::bf16 ? 4 : dtype_size(t); }

// The bytes one rank sends in `times` identical calls, added to c's (the MPI backend's algorithms; c.calls and
// c.elements counted as the counters do).

void count_calls(PlannedCollective& c, std::int64_t elements, std::int64_t times) {
  c.calls += times;
  c.elements += elements * times;
}

// An all-gather of a shard of n elements.
void add_all_gather(PlannedCollective& c, const Geometry& g, std::int64_t n, DType t, std::int64_t times,
                    std::size_t small) {
  count_calls(c, n, times);
  const int p = g.size();
  if (p <= 1 || n == 0) return;
  const std::uint64_t e = dtype_size(t);
  if (coll::algbw_bytes(CollOp::all_gather, static_cast<std::size_t>(n), t, p) < small) {
    for (int k = 1; k < p; k *= 2)  // Bruck: round k sends min(2^k, p − 2^k) blocks to rank − 2^k
      c.bytes[g.level_to((g.pos - k + p) % p)] += std::uint64_t(std::min(k, p - k)) * n * e * times;
  } else {
    c.bytes[g.level_to((g.pos + 1) % p)] += std::uint64_t(p - 1) * n * e * times;
  }
}

// A reduce-scatter of a full input of `full` elements (p equal blocks).
void add_reduce_scatter(PlannedCollective& c, const Geometry& g, std::int64_t full, DType t, std::int64_t times,
                        std::size_t small) {
  count_calls(c, full, times);
  const int p = g.size();
  if (p <= 1 || full == 0) return;
  const std::uint64_t n = static_cast<std::uint64_t>(full / p);
  if (coll::algbw_bytes(CollOp::reduce_scatter, static_cast<std::size_t>(full), t, p) < small) {
    for (int q = 0; q < p; ++q)  // direct: own block of every other rank straight to it
      if (q != g.pos) c.bytes[g.level_to(q)] += n * dtype_size(t) * times;
  } else {
    c.bytes[g.level_to((g.pos + 1) % p)] += (n * dtype_size(t) + std::uint64_t(p - 2) * n * acc_size(t)) * times;
  }
}

void add_all_reduce(PlannedCollective& c, const Geometry& g, std::int64_t count, DType t, std::int64_t times,
                    std::size_t small) {
  count_calls(c, count, times);
  const int p = g.size();
  if (p <= 1 || count == 0) return;
  const std::uint64_t e = dtype_size(t), ea = acc_size(t);
  if (coll::algbw_bytes(CollOp::all_reduce, static_cast<std::size_t>(count), t, p) < small) {
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
  // The reduce-scatter's p − 1 steps send every chunk but the rank's own, the first (chunk pos − 1) at e bytes
  // and the partial sums after it at ea; the all-gather's send every chunk but pos + 1's. Summed in closed form:
  // a step walks the world's ring once per call, which at thousands of ranks dominated describing them.
  const std::uint64_t n = static_cast<std::uint64_t>(count);
  const std::uint64_t b = chunk(g.pos - 1) * e + (n - chunk(g.pos) - chunk(g.pos - 1)) * ea + (n - chunk(g.pos + 1)) * e;
  c.bytes[g.level_to((g.pos + 1) % p)] += b * times;
}

// Pairwise exchange: count / p elements to every other member (the counters' element count includes the own share).
void add_all_to_all(PlannedCollective& c, const Geometry& g, std::int64_t count, DType t, std::int64_t times) {
  count_calls(c, count, times);
  const int p = g.size();
  if (p <= 1 || count == 0) return;
  for (int q = 0; q < p; ++q)
    if (q != g.pos) c.bytes[g.level_to(q)] += static_cast<std::uint64_t>(count / p) * dtype_size(t) * times;
}

void add_send(PlannedCollective& c, const Geometry& g, int peer, std::int64_t count, DType t, std::int64_t times) {
  count_calls(c, count, times);
  c.bytes[g.level_to(peer)] += static_cast<std::uint64_t>(count) * dtype_size(t) * times;
}

void add_recv(PlannedCollective& c, std::int64_t count, std::int64_t times) {
  count_calls(c, count, times);  // a receive sends nothing
}

// Takes every declaration into the plan's totals (one row per op, group, dtype and when) and, for describe_step,
// records it alone too (its bytes from the same code) with the walk's place and the stream the engine declared.
class Recorder final : public CollectiveLedger {
 public:
  Recorder(SchedulerPlan& plan, StepDescription* out, const PlanInputs& in, Positions& positions)
      : plan_(plan), out_(out), small_(in.small_message_bytes), positions_(positions), rpn_(in.ranks_per_node) {}

  /// The unit call declarations now belong to (-1: the step end); each place starts on the compute stream.
  void at(int call) {
    call_ = call;
    stream_ = CommStream::compute;
    place_ = CommPlace::before_unit;
    rounds_ = 1;
    blocks_ = 0;
  }

  void all_gather(const PlanGroup& g, std::int64_t n, DType t, std::int64_t times, std::string_view when) override {
    declare(CollOp::all_gather, g, t, when, -1,
            [&](PlannedCollective& c, const Geometry& geo) { add_all_gather(c, geo, n, t, times, small_); });
  }
  void reduce_scatter(const PlanGroup& g, std::int64_t n, DType t, std::int64_t times, std::string_view when) override {
    declare(CollOp::reduce_scatter, g, t, when, -1,
            [&](PlannedCollective& c, const Geometry& geo) { add_reduce_scatter(c, geo, n, t, times, small_); });
  }
  void all_reduce(const PlanGroup& g, std::int64_t n, DType t, std::int64_t times, std::string_view when) override {
    declare(CollOp::all_reduce, g, t, when, -1,
            [&](PlannedCollective& c, const Geometry& geo) { add_all_reduce(c, geo, n, t, times, small_); });
  }
  void all_to_all(const PlanGroup& g, CollOp op, std::int64_t n, DType t, std::int64_t times,
                  std::string_view when) override {
    HZP_CHECK(op == CollOp::all_to_all || op == CollOp::all_to_allv, "plan: all_to_all takes all_to_all or all_to_allv");
    declare(op, g, t, when, -1, [&](PlannedCollective& c, const Geometry& geo) { add_all_to_all(c, geo, n, t, times); });
  }
  void send(const PlanGroup& g, int peer, std::int64_t n, DType t, std::int64_t times, std::string_view when) override {
    declare(CollOp::send, g, t, when, peer,
            [&](PlannedCollective& c, const Geometry& geo) { add_send(c, geo, peer, n, t, times); });
  }
  void recv(const PlanGroup& g, int peer, std::int64_t n, DType t, std::int64_t times, std::string_view when) override {
    declare(CollOp::recv, g, t, when, peer, [&](PlannedCollective& c, const Geometry&) { add_recv(c, n, times); });
  }
  void stream(CommStream s, CommPlace p = CommPlace::before_unit) override {
    stream_ = s;
    place_ = p;
    rounds_ = 1;
    blocks_ = 0;
  }
  void ring(int rounds, int blocks) override {
    rounds_ = rounds;
    blocks_ = blocks;
  }

 private:
  template <typename Add>
  void declare(CollOp op, const PlanGroup& g, DType t, std::string_view when, int peer, Add&& add) {
    PlannedCollective one;
    one.op = op;
    one.group = g.name;
    one.group_size = static_cast<int>(g.members.size());
    one.dtype = t;
    one.when = when;
    const Geometry geo{&g.members.get(), positions_.of(g.members), rpn_};
    add(one, geo);
    // The row sums its calls' counts (what add_* adds does not depend on what the row holds).
    PlannedCollective& r = row(one);
    r.calls += one.calls;
    r.elements += one.elements;
    for (std::size_t l = 0; l < r.bytes.size(); ++l) r.bytes[l] += one.bytes[l];
    if (out_ != nullptr) out_->events.push_back({call_, stream_, place_, one, g.members, peer, rounds_, blocks_});
  }

  // The plan's row for the call's op, group, dtype and when (the first call's group size), made empty on first use.
  // The last row used is tried first: a unit's calls repeat at every micro-batch.
  PlannedCollective& row(const PlannedCollective& call) {
    auto is = [&](const PlannedCollective& c) {
      return c.op == call.op && c.group == call.group && c.dtype == call.dtype && c.when == call.when;
    };
    std::vector<PlannedCollective>& rows = plan_.collectives;
    if (last_row_ < rows.size() && is(rows[last_row_])) return rows[last_row_];
    for (last_row_ = 0; last_row_ < rows.size(); ++last_row_)
      if (is(rows[last_row_])) return rows[last_row_];
    PlannedCollective& r = rows.emplace_back(call);
    r.calls = r.elements = 0;
    r.bytes = {};
    return r;
  }

  SchedulerPlan& plan_;
  StepDescription* out_;
  std::size_t small_;
  Positions& positions_;
  int rpn_;
  int call_ = -1;
  CommStream stream_ = CommStream::compute;
  CommPlace place_ = CommPlace::before_unit;
  int rounds_ = 1, blocks_ = 0;
  std::size_t last_row_ = 0;
};

}  // namespace

std::string_view to_string(CommStream s) {
  switch (s) {
    case CommStream::compute: return "compute";
    case CommStream::params: return "params";
    case CommStream::gradients: return "gradients";
    case CommStream::pipeline: return "pipeline";
    case CommStream::ring: return "ring";
  }
  return "?";
}

std::uint64_t SchedulerPlan::state_total() const {
  std::uint64_t t = 0;
  for (std::uint64_t b : state_bytes) t += b;
  return t;
}

std::string SchedulerPlan::to_text() const {
  std::ostringstream o;
  auto gib = [](double b) { return b / (1024.0 * 1024.0 * 1024.0); };
  o << "scheduler " << scheduler << ", W = " << world_size << ", rank " << rank << ", N = " << params
    << " parameters, " << micro_batches_per_rank << " micro-batches per rank per step, at most "
    << activations_in_flight << " of them holding activations at once\n";
  o << "model state per rank (bytes, GiB):\n";
  for (std::size_t i = 0; i < state_bytes.size(); ++i)
    o << "  " << std::left << std::setw(8) << kStateComponents[i] << std::right << std::setw(18) << state_bytes[i]
      << std::setw(12) << std::fixed << std::setprecision(3) << gib(double(state_bytes[i])) << "\n";
  o << "  " << std::left << std::setw(8) << "total" << std::right << std::setw(18) << state_total() << std::setw(12)
    << gib(double(state_total())) << "  (" << std::setprecision(2) << double(state_total()) / double(std::max<std::int64_t>(params, 1))
    << " bytes/parameter)\n";
  if (gathered_peak_bytes > 0)
    o << "gathered parameters held at once, at most: " << gathered_peak_bytes << " bytes (" << std::setprecision(3)
      << gib(double(gathered_peak_bytes)) << " GiB; beside the model state)\n";
  if (activation_peak_bytes > 0) {
    o << "activations (estimated from the model's units; kernel scratch not included): " << activation_bytes_per_micro_batch
      << " bytes per micro-batch (" << std::setprecision(3) << gib(double(activation_bytes_per_micro_batch))
      << " GiB), at most " << activation_peak_bytes << " bytes (" << gib(double(activation_peak_bytes))
      << " GiB) over the step";
    if (activation_waiting_bytes > 0)
      o << ", plus input gradients waiting for the previous stage: at most " << activation_waiting_bytes << " bytes ("
        << gib(double(activation_waiting_bytes)) << " GiB)";
    o << "\n";
  }
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


std::string SchedulerPlan::to_json() const {
  std::ostringstream o;
  o << "{\"scheduler\": " << json_quote(scheduler) << ", \"world_size\": " << world_size << ", \"rank\": " << rank
    << ", \"params\": " << params << ", \"micro_batches_per_rank\": " << micro_batches_per_rank
    << ", \"activations_in_flight\": " << activations_in_flight << ", \"state_bytes\": {";
  for (std::size_t i = 0; i < state_bytes.size(); ++i) o << json_quote(kStateComponents[i]) << ": " << state_bytes[i] << ", ";
  o << "\"total\": " << state_total() << "}, \"gathered_peak_bytes\": " << gathered_peak_bytes
    << ", \"activation_bytes\": {\"per_micro_batch\": " << activation_bytes_per_micro_batch
    << ", \"peak\": " << activation_peak_bytes << ", \"waiting_at_most\": " << activation_waiting_bytes
    << "}, \"collectives\": [";
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    const PlannedCollective& c = collectives[i];
    o << (i ? ", " : "") << "{\"op\": " << json_quote(coll::coll_op_name(c.op)) << ", \"group\": " << json_quote(c.group.view())
      << ", \"group_size\": " << c.group_size << ", \"dtype\": " << json_quote(dtype_name(c.dtype))
      << ", \"calls\": " << c.calls << ", \"elements\": " << c.elements << ", \"bytes\": {\"intra\": " << c.bytes[0]
      << ", \"inter\": " << c.bytes[1] << "}, \"when\": " << json_quote(c.when.view()) << "}";
  }
  o << "]}";
  return o.str();
}

coll::Topology plan_topology(const PlanInputs& in) {
  return coll::Topology::virtual_nodes(in.world_size, in.ranks_per_node > 0 ? in.ranks_per_node : in.world_size,
                                       in.rank);
}

void check_plan_batches(std::string_view scheduler, const PlanInputs& in, int group, int dp) {
  const std::int64_t mb = in.train.micro_batches();
  std::ostringstream bad;
  if (group > 0 && in.world_size % group != 0)
    bad << "\n  scheduler.group_size = " << group << " does not divide the world size " << in.world_size;
  if (dp == 0) dp = in.world_size;
  if (mb % dp != 0)
    bad << "\n  train.global_batch = " << in.train.global_batch << " / train.micro_batch_size = "
        << in.train.micro_batch_size << " gives " << mb << " micro-batches per step, not a multiple of dp = "
        << (dp == in.world_size ? "W = " : "") << dp;
  if (!bad.str().empty())
    HZP_THROW(ConfigError, "scheduler ", scheduler, " at world size ", in.world_size, ":", bad.str(),
              "\n  fix: a train.global_batch, train.micro_batch_size and group size that divide as stated, or another "
              "world size");
}

PlanGroup world_plan_group(std::string name, int world_size) {
  std::vector<int> members(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) members[static_cast<std::size_t>(r)] = r;
  return {std::move(name), std::move(members)};
}

void declare_norm(CollectiveLedger& out, const PlanGroup& g, bool deterministic) {
  if (g.members.size() <= 1) return;
  if (deterministic)
    out.all_reduce(g, 4, DType::i64, 1, "per step (norm, exact)");
  else
    out.all_reduce(g, 1, DType::f64, 1, "per step (norm)");
}

DType grad_wire_dtype(const workloads::TrainConfig& train) { return train.deterministic ? DType::i64 : DType::f32; }

SchedulerPlan plan_from_engine(std::string scheduler, const PlanInputs& in, EnginePlan& e, StepDescription* events) {
  HZP_CHECK(in.layout != nullptr, "plan: a parameter layout is required");
  if (in.world_size < 1 || in.rank < 0 || in.rank >= in.world_size)
    HZP_THROW(ConfigError, "plan: world size ", in.world_size, " and rank ", in.rank, " do not fit");
  if (in.ranks_per_node > 0 && in.world_size % in.ranks_per_node != 0)
    HZP_THROW(ConfigError, "plan: topology.ranks_per_node = ", in.ranks_per_node, " does not divide the world size ",
              in.world_size);
  SchedulerPlan p;
  p.scheduler = std::move(scheduler);
  p.world_size = in.world_size;
  p.rank = in.rank;
  p.params = in.layout->total_numel();
  p.micro_batches_per_rank = e.micro_batches_per_rank;
  p.state_bytes = e.state_bytes;
  Positions positions(in.rank);
  Recorder b(p, events, in, positions);
  // The schedule the driver runs (step_driver.cpp), unit by unit in the order it calls the model.
  const int m = static_cast<int>(e.micro_batches_per_rank);
  const std::vector<Action> actions = e.actions.empty() ? sequential_schedule(m, in.layout->num_units()) : e.actions;
  int call = 0;
  for_each_unit_call(actions, [&](const Action& a, int u) {
    b.at(call++);
    if (events != nullptr) events->calls.emplace_back(a, u);
    e.unit(a, u, m, b);
  });
  if (events != nullptr) {
    events->actions = actions;
    events->prefetch = e.prefetch;
    events->model_tp = e.model_tp;
    events->model_cp = e.model_cp;
  }
  p.activations_in_flight = max_in_flight(actions, std::max(e.chunks_per_stage, 1));
  p.gathered_peak_bytes = e.gathered_peak_bytes;
  if (in.model != nullptr) {
    const workloads::TensorParallelRun run{.tp = e.model_tp,
                                           .cp = e.model_cp,
                                           .sequence_parallel = in.options.sequence_parallel && e.model_tp > 1,
                                           .recompute = in.train.recompute,
                                           .micro_batch_size = in.train.micro_batch_size,
                                           .precision = in.train.precision};
    const ActivationEstimate a = estimate_activations(*in.model, run, actions);
    p.activation_bytes_per_micro_batch = a.per_micro_batch;
    p.activation_peak_bytes = a.peak;
    p.activation_waiting_bytes = a.input_grads_waiting_at_most;
  }
  b.at(-1);
  e.step_end(b);
  b.stream(CommStream::compute);
  if (!e.driver_group.members.empty())
    StepDriver::plan_collectives(in.train, *in.layout, e.driver_group,
                                 e.verdict_group.members.empty() ? e.driver_group : e.verdict_group,
                                 e.micro_batches_per_rank, b);
  // StepDriver::end_model_step: the model's step statistics (the MoE load) summed over the engine's scalars group.
  if (!e.driver_group.members.empty() && in.model != nullptr && in.model->step_statistics() > 0)
    b.all_reduce(e.driver_group, in.model->step_statistics(), DType::f64, 1, "per step (model statistics: MoE load)");
  return p;
}

}  // namespace hzp::schedulers
