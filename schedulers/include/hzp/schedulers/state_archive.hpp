// StateArchive: what a scheduler sees of a checkpoint (docs/checkpoints.md). A scheduler describes the optimizer
// state it holds as runs of the model's flat, unpadded order (ShardLayout::flat_runs; a replica or `none` one run
// of everything) and hands each component's buffer over; the harness's implementation (checkpoint_io.cpp) moves
// exactly those runs to or from the checkpoint file. Defined here, not in the harness, because schedulers may not
// depend on the harness: the interface is theirs, the file format the harness's.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hzp/core/dtype.hpp"
#include "hzp/schedulers/common/shard_layout.hpp"

namespace hzp::schedulers {

class StateArchive {
 public:
  using Run = ShardLayout::FlatSliceRun;
  virtual ~StateArchive() = default;

  /// true: restore (right after the scheduler's construction, before any step); false: save (between steps).
  virtual bool loading() const = 0;
  /// The step the run continues at: saving, the step just completed + 1; loading, the stored step + 1.
  virtual std::int64_t next_step() const = 0;
  /// Collective over every rank of the run: array `component` (master, m, v) in `dtype`. This rank's elements are
  /// `runs`: `global` in the flat order, `local` (elements) in `base`. Saving reads them (one replica of each
  /// element passes runs, the others none); loading writes them (every rank reads what it holds).
  virtual void array(std::string_view component, DType dtype, std::span<const Run> runs, void* base) = 0;
  /// Collective, the same on every rank: a list of exact doubles (deterministic mode's scales, the model's
  /// non-gradient state). Saving stores `values`; loading replaces them by the stored list (empty when absent).
  virtual void numbers(std::string_view name, std::vector<double>& values) = 0;
};

}  // namespace hzp::schedulers
