// Per-step measurements of one rank (metrics.hpp): field table, and the StepMeter that reads clocks,
// phase timers, collective counters, the allocator and the pool around Scheduler::step.
//
// Closure (docs/run.md): step_time = compute (forward + backward + recompute, exclusive phase timers on
// the compute thread) + exposed_comm (wait_s of the collectives the compute thread waited on, from the
// counters) + pipeline_wait + optimizer (the scheduler's StepStats) + other (the remainder: data
// loading, scheduler bookkeeping). Tests require `other` to stay within 2% of the step time. On a GPU the step
// driver's engines time the compute stream's stalls on communication on the device (StepStats::device_comm_timed),
// and those are the exposed communication.
#include "metrics.hpp"

#include <algorithm>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/trace_sink.hpp"

namespace hzp::harness {
namespace {

constexpr FieldInfo kFields[] = {
    {"step_time_s", "s", false, "wall time of Scheduler::step on this rank"},
    {"cpu_time_s", "s", false, "CPU time of the compute thread during the step (beside its wall time)"},
    {"compute_s", "s", false, "forward + backward + recompute on the compute thread"},
    {"forward_s", "s", false, "units' forward calls, exclusive of nested phases"},
    {"backward_s", "s", false, "units' backward calls, their recompute excluded"},
    {"recompute_s", "s", false, "forward re-run inside backward (train.recompute)"},
    {"exposed_comm_s", "s", false, "time the compute thread waited on collectives (join + transfer)"},
    {"join_wait_s", "s", false, "part of exposed_comm_s before the last peer joined"},
    {"transfer_wait_s", "s", false, "part of exposed_comm_s after every peer joined (emulated links included)"},
    {"pipeline_wait_s", "s", false, "time the compute thread waited on pipeline peers"},
    {"optimizer_s", "s", false, "gradient norm, clipping and the update (the scheduler's figure)"},
    {"other_s", "s", false, "step_time_s minus the parts above: data loading, scheduler bookkeeping"},
    {"comm_time_s", "s", false, "summed duration of every collective of the scheduler (all threads)"},
    {"mem_allocated_bytes", "bytes", true, "caching allocator: bytes in live blocks after the step"},
    {"mem_reserved_bytes", "bytes", true, "caching allocator: bytes held from the backing after the step"},
    {"mem_peak_bytes", "bytes", true, "caching allocator: peak allocated bytes during the step"},
    {"mem_activation_peak_bytes", "bytes", true,
     "caching allocator: peak bytes of tag activation during the step (what forward keeps for backward)"},
    {"slack", "1", false, "1 - allocated/reserved after the step (0 when nothing is reserved)"},
    {"ext_frag", "1", false, "1 - largest free block / free bytes after the step"},
    {"pool_occupancy", "1", false, "ring pool: peak in-use bytes over capacity during the step"},
    {"pool_stalls", "1", true, "ring pool: acquires that had to wait during the step"},
    {"attention_pairs", "1", true,
     "(query, key) position pairs attention visited: document_causal_pairs of the rank's rows over its micro-batches"},
};
static_assert(std::size(kFields) == kNumRankFields);

constexpr AllocationTag kStateTags[] = {AllocationTag::param, AllocationTag::grad, AllocationTag::master,
                                        AllocationTag::adam_m, AllocationTag::adam_v};

}  // namespace

BackgroundWait background_wait(const std::vector<std::pair<double, double>>& waits,
                               const std::vector<coll::CallRecord>& records, std::uint64_t compute_thread) {
  BackgroundWait out;
  std::vector<const coll::CallRecord*> bg;
  for (const coll::CallRecord& r : records)
    if (r.thread_id != compute_thread) bg.push_back(&r);
  for (const auto& [b, e] : waits) {
    if (e <= b) continue;
    out.wait += e - b;
    // Elementary pieces between every record boundary inside [b, e]: a piece under some call's transfer
    // (after its last join) is transfer, else under some call's join phase is join, else neither (the
    // hand-off between threads).
    std::vector<double> cuts = {b, e};
    for (const coll::CallRecord* r : bg)
      for (double t : {r->start_s, std::max(r->start_s, r->last_join_s), r->end_s})
        if (t > b && t < e) cuts.push_back(t);
    std::sort(cuts.begin(), cuts.end());
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const double lo = cuts[i], hi = cuts[i + 1], mid = 0.5 * (lo + hi);
      if (hi <= lo) continue;
      bool in_transfer = false, in_join = false;
      for (const coll::CallRecord* r : bg) {
        const double joined = std::max(r->start_s, r->last_join_s);
        if (mid > joined && mid < r->end_s) in_transfer = true;
        else if (mid > r->start_s && mid < joined) in_join = true;
      }
      if (in_transfer) out.transfer += hi - lo;
      else if (in_join) out.join += hi - lo;
    }
  }
  return out;
}

const FieldInfo& field_info(RankField f) { return kFields[static_cast<int>(f)]; }

StepMeter::StepMeter(CachingAllocator& allocator, coll::CommCounters* counters, RingPool* pool)
    : alloc_(allocator), counters_(counters), pool_(pool), thread_id_(trace::current_thread_id()) {}

void StepMeter::begin() {
  HZP_CHECK(trace::current_thread_id() == thread_id_, "a step is metered on the thread that made the meter");
  alloc_.reset_peaks();
  if (pool_ != nullptr) {
    pool_->reset_peaks();
    before_stalls_ = 0;
    for (const RingStats& r : pool_->stats()) before_stalls_ += r.stalls;
  }
  if (counters_ != nullptr) before_counters_ = counters_->snapshot();
  before_phases_ = profile::thread_phase_totals();
  cpu0_ = thread_cpu_seconds();
  wall0_ = wall_seconds();
}

RankSample StepMeter::end(const schedulers::StepStats& st) {
  const double wall = wall_seconds() - wall0_;
  const double cpu = thread_cpu_seconds() - cpu0_;
  const profile::PhaseTotals ph = profile::thread_phase_totals() - before_phases_;
  RankSample s;
  s[RankField::step_time_s] = wall;
  s[RankField::cpu_time_s] = cpu;
  s[RankField::attention_pairs] = st.attention_pairs;
  s[RankField::forward_s] = ph.of(profile::Phase::forward);
  s[RankField::backward_s] = ph.of(profile::Phase::backward);
  s[RankField::recompute_s] = ph.of(profile::Phase::recompute);
  if (st.device_timed) {
    s[RankField::forward_s] = st.forward_seconds;
    s[RankField::backward_s] = st.backward_seconds;
    s[RankField::recompute_s] = 0;  // inside backward_s: the events bracket whole backward passes
  }
  s[RankField::compute_s] = s[RankField::forward_s] + s[RankField::backward_s] + s[RankField::recompute_s];

  records_.clear();
  if (counters_ != nullptr) {
    const coll::CounterSnapshot d = counters_->delta(before_counters_);
    double comm_time = 0;
    for (int o = 0; o < coll::kNumCollOps; ++o) {
      const auto op = static_cast<coll::CollOp>(o);
      const coll::OpTotals t = d.total(op);
      comm_time += t.time_s;
      for (int l = 0; l < coll::kNumLinkLevels; ++l) {
        const auto level = static_cast<coll::LinkLevel>(l);
        s.comm(op, level, 0) = static_cast<double>(t.level[l].calls);
        s.comm(op, level, 1) = static_cast<double>(t.level[l].bytes);
        s.comm(op, level, 2) = t.level[l].time_s;
      }
    }
    s[RankField::comm_time_s] = comm_time;
    // Exposed = what the compute thread itself waited; a background thread's waits overlap compute. Waits on the
    // pipeline group (its sends and receives, and the loss sum where the stages meet at the end) are the step's
    // pipeline wait (StepStats), so they are not counted twice.
    const auto pipeline = [&](int g) { return g >= 0 && static_cast<std::size_t>(g) < d.groups.size() && d.groups[g] == "pp"; };
    double wait = 0, join = 0, transfer = 0;
    if (d.records.size() == d.calls()) {
      for (const coll::CallRecord& r : d.records)
        if (r.thread_id == thread_id_ && !pipeline(r.group)) {
          wait += r.wait_s;
          join += r.join_wait_s;
          transfer += r.transfer_wait_s;
        }
    } else {
      // The record log overflowed this step: fall back to every thread's waits (an upper bound).
      for (std::size_t g = 0; g < d.groups.size(); ++g)
        for (int o = 0; o < coll::kNumCollOps; ++o) {
          if (pipeline(static_cast<int>(g))) continue;
          const coll::OpTotals& t = d.per_group[g][o];
          wait += t.wait_s;
          join += t.join_wait_s;
          transfer += t.transfer_wait_s;
        }
    }
    if (!st.background_waits.empty()) {
      const BackgroundWait b = background_wait(st.background_waits, d.records, thread_id_);
      wait += b.wait;
      join += b.join;
      transfer += b.transfer;
    }
    s[RankField::exposed_comm_s] = wait;
    s[RankField::join_wait_s] = join;
    s[RankField::transfer_wait_s] = transfer;
    records_ = d.records;
  }
  if (st.device_comm_timed) {
    // On a GPU the host's waits are completion times, not stalls: the compute stream's own stalls, timed on the
    // device, are the exposed communication. The device cannot tell waiting for a peer from waiting for the
    // transfer (a hold of an emulated link included), so all of it is transfer.
    s[RankField::exposed_comm_s] = st.device_comm_wait_seconds;
    s[RankField::join_wait_s] = 0;
    s[RankField::transfer_wait_s] = st.device_comm_wait_seconds;
  }
  s[RankField::pipeline_wait_s] = st.pipeline_wait_seconds;
  s[RankField::optimizer_s] = st.optimizer_seconds;
  s[RankField::other_s] = wall - s[RankField::compute_s] - s[RankField::exposed_comm_s] -
                          s[RankField::pipeline_wait_s] - s[RankField::optimizer_s];

  const AllocatorStats a = alloc_.stats();
  s[RankField::mem_allocated_bytes] = static_cast<double>(a.allocated_bytes);
  s[RankField::mem_reserved_bytes] = static_cast<double>(a.reserved_bytes);
  s[RankField::mem_peak_bytes] = static_cast<double>(a.peak_allocated_bytes);
  s[RankField::mem_activation_peak_bytes] = static_cast<double>(a.tag(AllocationTag::activation).peak_allocated_bytes);
  s[RankField::slack] = a.slack();
  s[RankField::ext_frag] = a.ext_frag();
  if (pool_ != nullptr) {
    double occupancy = 0;
    std::uint64_t stalls = 0;
    for (const RingStats& r : pool_->stats()) {
      if (r.capacity_bytes > 0)
        occupancy = std::max(occupancy, static_cast<double>(r.peak_in_use_bytes) / static_cast<double>(r.capacity_bytes));
      stalls += r.stalls;
    }
    s[RankField::pool_occupancy] = occupancy;
    s[RankField::pool_stalls] = static_cast<double>(stalls - before_stalls_);
  }

  s[StepField::loss] = st.loss;
  s[StepField::grad_norm] = st.grad_norm;
  s[StepField::lr] = st.lr;
  s[StepField::clip_coefficient] = st.clip_coefficient;
  s[StepField::tokens] = static_cast<double>(st.tokens);
  s[StepField::retries] = static_cast<double>(st.retries);
  return s;
}

std::array<std::int64_t, 5> model_state_bytes(const CachingAllocator& allocator) {
  const AllocatorStats a = allocator.stats();
  std::array<std::int64_t, 5> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int64_t>(a.tag(kStateTags[i]).requested_bytes);
  return out;
}

}  // namespace hzp::harness
