// The per-step rows of a run's results file (docs/results-schema.md "Growing series"): steps/* [step]
// from rank 0's StepRecord, ranks/* [step, rank] from every rank's sample, comm/<op>/<level>/* [step,
// rank] for the collectives the scheduler issued. Used on the results thread only.
#pragma once

#include <set>
#include <span>
#include <utility>

#include "hzp/harness/results_file.hpp"
#include "metrics.hpp"
#include "summary.hpp"

namespace hzp::harness {

class ResultsRows {
 public:
  /// `has_pool`: the scheduler keeps a ring pool (ranks/pool_* are written only then).
  ResultsRows(int world_size, bool has_pool) : world_size_(world_size), has_pool_(has_pool) {}

  /// Appends one step. A comm/<op>/<level> series first seen at step k starts with k rows of zeros (the
  /// op did not run before), so every series keeps one row per step.
  void append(ResultsWriter& w, const StepRecord& record, std::span<const RankSample> samples);

 private:
  int world_size_;
  bool has_pool_;
  std::set<std::pair<int, int>> comm_seen_;  // (op, level)
  std::int64_t rows_ = 0;
};

}  // namespace hzp::harness
