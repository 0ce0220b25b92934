// CommCounters: aggregation of call records per group and op (and level), a bounded log of recent
// records, and snapshot/delta arithmetic for per-step statistics.
#include "hzp/collectives/counters.hpp"

#include <algorithm>

#include "hzp/core/error.hpp"

namespace hzp::coll {

OpTotals& OpTotals::operator+=(const OpTotals& o) {
  calls += o.calls;
  elements += o.elements;
  time_s += o.time_s;
  wait_s += o.wait_s;
  join_wait_s += o.join_wait_s;
  transfer_wait_s += o.transfer_wait_s;
  emulated_s += o.emulated_s;
  for (int l = 0; l < kNumLinkLevels; ++l) {
    level[l].calls += o.level[l].calls;
    level[l].bytes += o.level[l].bytes;
    level[l].modelled_bytes += o.level[l].modelled_bytes;
    level[l].time_s += o.level[l].time_s;
  }
  return *this;
}

OpTotals& OpTotals::operator-=(const OpTotals& o) {
  calls -= o.calls;
  elements -= o.elements;
  time_s -= o.time_s;
  wait_s -= o.wait_s;
  join_wait_s -= o.join_wait_s;
  transfer_wait_s -= o.transfer_wait_s;
  emulated_s -= o.emulated_s;
  for (int l = 0; l < kNumLinkLevels; ++l) {
    level[l].calls -= o.level[l].calls;
    level[l].bytes -= o.level[l].bytes;
    level[l].modelled_bytes -= o.level[l].modelled_bytes;
    level[l].time_s -= o.level[l].time_s;
  }
  return *this;
}

OpTotals CounterSnapshot::total(CollOp op) const {
  OpTotals t;
  for (const auto& g : per_group) t += g[static_cast<std::size_t>(op)];
  return t;
}

OpTotals CounterSnapshot::total(std::string_view group, CollOp op) const {
  for (std::size_t g = 0; g < groups.size() && g < per_group.size(); ++g)
    if (groups[g] == group) return per_group[g][static_cast<std::size_t>(op)];
  return {};
}

std::uint64_t CounterSnapshot::bytes(LinkLevel level) const {
  std::uint64_t b = 0;
  for (const auto& g : per_group)
    for (const OpTotals& t : g) b += t.level[static_cast<int>(level)].bytes;
  return b;
}

CommCounters::CommCounters(std::size_t record_capacity) : capacity_(record_capacity) {}

int CommCounters::intern_group(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g] == name) return static_cast<int>(g);
  groups_.emplace_back(name);
  totals_.emplace_back();
  return static_cast<int>(groups_.size() - 1);
}

std::string CommCounters::group_name(int group) const {
  std::lock_guard<std::mutex> lock(mu_);
  HZP_CHECK(group >= 0 && static_cast<std::size_t>(group) < groups_.size(), "unknown counter group ", group);
  return groups_[static_cast<std::size_t>(group)];
}

void CommCounters::record(const CallRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  HZP_CHECK(r.group >= 0 && static_cast<std::size_t>(r.group) < totals_.size(), "record of unknown group ", r.group);
  OpTotals& t = totals_[static_cast<std::size_t>(r.group)][static_cast<std::size_t>(r.op)];
  const double duration = r.end_s - r.start_s;
  ++t.calls;
  t.elements += r.count;
  t.time_s += duration;
  t.wait_s += r.wait_s;
  t.join_wait_s += r.join_wait_s;
  t.transfer_wait_s += r.transfer_wait_s;
  t.emulated_s += r.emulated_s;
  for (int l = 0; l < kNumLinkLevels; ++l) {
    if (r.bytes[l] == 0) continue;
    LevelTotals& lt = t.level[l];
    ++lt.calls;
    lt.bytes += r.bytes[l];
    if (r.bytes_modelled) lt.modelled_bytes += r.bytes[l];
    lt.time_s += duration;
  }
  if (capacity_ > 0) {
    if (ring_.size() < capacity_)
      ring_.push_back(r);
    else
      ring_[static_cast<std::size_t>((calls_ - dropped_base_) % capacity_)] = r;
  }
  ++calls_;
}

CounterSnapshot CommCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  CounterSnapshot s;
  s.calls_begin = 0;
  s.calls_end = calls_;
  s.groups = groups_;
  s.per_group = totals_;
  return s;
}

CounterSnapshot CommCounters::delta(const CounterSnapshot& since) const {
  CounterSnapshot now = snapshot();
  HZP_CHECK(since.calls_end <= now.calls_end, "delta: the earlier snapshot covers ", since.calls_end,
            " calls, more than these counters have seen (", now.calls_end, "): a snapshot of other counters?");
  // Groups are only ever appended, so the earlier snapshot's indices are a prefix of ours.
  for (std::size_t g = 0; g < since.per_group.size() && g < now.per_group.size(); ++g)
    for (std::size_t o = 0; o < now.per_group[g].size(); ++o) now.per_group[g][o] -= since.per_group[g][o];
  now.calls_begin = since.calls_end;
  now.records = records(since.calls_end);
  return now;
}

std::vector<CallRecord> CommCounters::records(std::uint64_t from_call) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CallRecord> out;
  const std::uint64_t first_kept = calls_ - ring_.size();
  for (std::uint64_t c = std::max(from_call, first_kept); c < calls_; ++c)
    out.push_back(ring_[static_cast<std::size_t>((c - dropped_base_) % capacity_)]);
  return out;
}

std::uint64_t CommCounters::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::uint64_t CommCounters::dropped_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_ - ring_.size();
}

void CommCounters::set_record_capacity(std::size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  // Kept records are dropped: a record's slot is its call index modulo the capacity.
  ring_.clear();
  ring_.shrink_to_fit();
  capacity_ = capacity;
  dropped_base_ = calls_;
}

}  // namespace hzp::coll
