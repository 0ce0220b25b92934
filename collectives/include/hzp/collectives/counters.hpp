// Per-call collective counters (docs/architecture.md and docs/collectives.md, "Counters"): what each
// call was given (op, elements, dtype, group, thread, sequence number, start/end) and, separately, the bytes
// this rank moved per link level, measured by construction (our algorithms) or modelled (MPICH's
// native collectives). Aggregates per group, op and level; snapshot() / delta() for per-step numbers.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/types.hpp"
#include "hzp/core/dtype.hpp"

namespace hzp::coll {

/// One completed call, as seen by the calling rank. Times are wall_seconds() (CLOCK_MONOTONIC,
/// comparable across the processes of one machine).
struct CallRecord {
  CollOp op = CollOp::barrier;
  DType dtype = DType::u8;
  std::int64_t count = 0;      // elements as given: the per-rank input (all_gather: the shard;
                               // reduce_scatter: the full vector; all_to_allv: elements sent)
  int group = -1;              // index into CounterSnapshot::groups / CommCounters::group_name()
  int group_size = 0;
  int peer = -1;               // send/recv: the peer; broadcast: the root; else -1
  std::uint64_t thread_id = 0; // Linux thread id (gettid) of the issuing thread
  std::uint64_t seq = 0;       // per-communicator sequence number (collectives and p2p counted apart)
  double start_s = 0;          // start_X called (this rank joined)
  double end_s = 0;            // completion observed (after any emulated remainder)
  double last_join_s = 0;      // the latest join among the ranks this rank heard from
  double wait_s = 0;           // time the issuing thread spent blocked in wait()/test() on it
  double join_wait_s = 0;      // part of wait_s before the last peer joined
  double transfer_wait_s = 0;  // wait_s - join_wait_s (includes emulated_s)
  double emulated_s = 0;       // part of the wait slept for link emulation (0 when off)
  double modelled_s = 0;       // the link model's duration of this call (0 when emulation off)
  std::array<std::uint64_t, kNumLinkLevels> bytes{};  // bytes this rank sent, per LinkLevel
  bool bytes_modelled = false; // true: bytes from the algorithm model (mpi_native), not observed
  std::string_view algorithm;  // "ring", "bruck", "recursive_doubling", "native:ring", ...
};

/// Totals over calls of one op on one level. `calls`/`time_s` count the calls that moved bytes on
/// this level (a call crossing both levels counts on both).
struct LevelTotals {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;
  std::uint64_t modelled_bytes = 0;  // the part of `bytes` that was modelled, not observed
  double time_s = 0;                 // sum of (end - start) of those calls
};

/// Totals over calls of one op (in one group, or over all groups).
struct OpTotals {
  std::uint64_t calls = 0;
  std::int64_t elements = 0;
  double time_s = 0;  // sum of (end - start)
  double wait_s = 0;
  double join_wait_s = 0;
  double transfer_wait_s = 0;
  double emulated_s = 0;
  std::array<LevelTotals, kNumLinkLevels> level{};

  OpTotals& operator+=(const OpTotals& o);
  OpTotals& operator-=(const OpTotals& o);
};

/// Aggregates at one moment (and, for a delta, the records of the calls completed in between).
struct CounterSnapshot {
  std::uint64_t calls_begin = 0;  // index of the first call covered (0 for snapshot())
  std::uint64_t calls_end = 0;    // one past the last call covered
  std::vector<std::string> groups;                          // group index -> name
  std::vector<std::array<OpTotals, kNumCollOps>> per_group; // [group][op]
  std::vector<CallRecord> records;  // delta(): the calls in [calls_begin, calls_end) still logged

  /// Over every group.
  OpTotals total(CollOp op) const;
  /// One group; zeros when the group never issued a call.
  OpTotals total(std::string_view group, CollOp op) const;
  LevelTotals level(CollOp op, LinkLevel level) const { return total(op).level[static_cast<int>(level)]; }
  /// Bytes on a level over every op and group.
  std::uint64_t bytes(LinkLevel level) const;
  std::uint64_t calls() const noexcept { return calls_end - calls_begin; }
};

/// Thread-safe: the main thread may take a snapshot while a background thread's duplicate records
/// (one mutex; a call records once, at completion). Shared by communicators created with
/// share_counters = true.
class CommCounters {
 public:
  /// Keeps at most `record_capacity` call records (the oldest are dropped first; aggregates always
  /// cover every call).
  explicit CommCounters(std::size_t record_capacity = 8192);

  /// Index of a group name (interned once; the communicator does this at construction).
  int intern_group(std::string_view name);
  std::string group_name(int group) const;

  void record(const CallRecord& r);

  /// Aggregates since construction (no records).
  CounterSnapshot snapshot() const;
  /// Aggregates of the calls completed since `since` was taken, with their records (those still in
  /// the log: see dropped_records()).
  CounterSnapshot delta(const CounterSnapshot& since) const;
  /// Records of calls with index >= from_call still in the log, oldest first.
  std::vector<CallRecord> records(std::uint64_t from_call = 0) const;
  std::uint64_t calls() const;
  std::uint64_t dropped_records() const;
  /// Changes how many records are kept; records kept so far are dropped.
  void set_record_capacity(std::size_t capacity);

 private:
  mutable std::mutex mu_;
  std::vector<std::string> groups_;
  std::vector<std::array<OpTotals, kNumCollOps>> totals_;
  std::vector<CallRecord> ring_;  // circular log of the last `capacity_` records
  std::size_t capacity_;
  std::uint64_t calls_ = 0;
  std::uint64_t dropped_base_ = 0;  // calls before the last set_record_capacity (never logged)
};

}  // namespace hzp::coll
