// Per-step metrics of `hzpbench run` (docs/run.md "Metrics"): what one rank measures
// around one scheduler step (the step time's closure into compute, exposed collective wait, pipeline
// wait, optimizer and other; CPU time; memory; collectives per op and level), packed as a flat vector
// of doubles so that rank 0 gathers every rank's sample in one collective on the harness communicator.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hzp/collectives/counters.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/core/ring_pool.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::harness {

/// The per-rank scalars, in their order inside a sample. Each is written as `ranks/<name>` [step, rank].
enum class RankField : int {
  step_time_s,
  cpu_time_s,
  compute_s,
  forward_s,
  backward_s,
  recompute_s,
  exposed_comm_s,
  join_wait_s,
  transfer_wait_s,
  pipeline_wait_s,
  optimizer_s,
  other_s,
  comm_time_s,
  mem_allocated_bytes,
  mem_reserved_bytes,
  mem_peak_bytes,
  mem_activation_peak_bytes,
  slack,
  ext_frag,
  pool_occupancy,
  pool_stalls,
  attention_pairs,
  kCount
};
inline constexpr int kNumRankFields = static_cast<int>(RankField::kCount);

/// Name (the dataset under ranks/), units, integer-valued, and meaning of each RankField.
struct FieldInfo {
  std::string_view name;
  std::string_view units;
  bool integer;
  std::string_view description;
};
const FieldInfo& field_info(RankField f);

/// Scalars every rank reports alike (the scheduler's step statistics); rank 0's are written.
enum class StepField : int { loss, grad_norm, lr, clip_coefficient, tokens, retries, kCount };
inline constexpr int kNumStepFields = static_cast<int>(StepField::kCount);

/// Per collective op and link level: count, bytes, time.
inline constexpr int kCommStats = 3;
inline constexpr int kNumCommValues = coll::kNumCollOps * coll::kNumLinkLevels * kCommStats;
inline constexpr std::string_view kCommStatNames[kCommStats] = {"count", "bytes", "time_s"};

/// One rank's measurements of one step.
struct RankSample {
  static constexpr std::size_t kWidth = kNumRankFields + kNumStepFields + kNumCommValues;
  std::array<double, kWidth> v{};

  double& operator[](RankField f) { return v[static_cast<std::size_t>(f)]; }
  double operator[](RankField f) const { return v[static_cast<std::size_t>(f)]; }
  double& operator[](StepField f) { return v[kNumRankFields + static_cast<std::size_t>(f)]; }
  double operator[](StepField f) const { return v[kNumRankFields + static_cast<std::size_t>(f)]; }
  /// stat 0 = count, 1 = bytes, 2 = time_s.
  double& comm(coll::CollOp op, coll::LinkLevel level, int stat) { return v[comm_index(op, level, stat)]; }
  double comm(coll::CollOp op, coll::LinkLevel level, int stat) const { return v[comm_index(op, level, stat)]; }
  static std::size_t comm_index(coll::CollOp op, coll::LinkLevel level, int stat) {
    return kNumRankFields + kNumStepFields +
           (static_cast<std::size_t>(op) * coll::kNumLinkLevels + static_cast<std::size_t>(level)) * kCommStats +
           static_cast<std::size_t>(stat);
  }
};

/// The compute thread's waits on background communication threads (StepStats::background_waits): their
/// total, and the parts during which some background call (a record of another thread than
/// `compute_thread`) was transferring (after its last peer joined) or, failing that, waiting for peers.
struct BackgroundWait {
  double wait = 0, join = 0, transfer = 0;
};
BackgroundWait background_wait(const std::vector<std::pair<double, double>>& waits,
                               const std::vector<coll::CallRecord>& records, std::uint64_t compute_thread);

/// Takes the readings before a step and turns the differences after it into a RankSample. Runs on the
/// thread that calls Scheduler::step (the compute thread, whose phases and waits are the exposed ones).
class StepMeter {
 public:
  /// `counters`: the scheduler's communicators' counters (null when it has none); `pool`: its ring pool
  /// (null when none). Both must outlive the meter.
  StepMeter(CachingAllocator& allocator, coll::CommCounters* counters, RingPool* pool);

  /// Readings before the step; resets the allocator's and the pool's peaks.
  void begin();
  /// Readings after the step that returned `stats`, the closure computed; also keeps the step's
  /// collective records (for the trace) in last_records().
  RankSample end(const schedulers::StepStats& stats);
  const std::vector<coll::CallRecord>& last_records() const noexcept { return records_; }

 private:
  CachingAllocator& alloc_;
  coll::CommCounters* counters_;
  RingPool* pool_;
  std::uint64_t thread_id_;
  coll::CounterSnapshot before_counters_;
  profile::PhaseTotals before_phases_;
  std::uint64_t before_stalls_ = 0;
  double wall0_ = 0, cpu0_ = 0;
  std::vector<coll::CallRecord> records_;
};

/// The allocator's persistent model state by component (param, grad, master, m, v), requested bytes per
/// tag, read once after step 0.
inline constexpr std::string_view kStateComponents[] = {"param", "grad", "master", "m", "v"};
std::array<std::int64_t, 5> model_state_bytes(const CachingAllocator& allocator);

}  // namespace hzp::harness
