// asynchzp's scheduler.tied_split (docs/data-parallel.md "The tied table's chain"): the tied embedding table's
// gradient has two writers, the head (dense, final at the start of backward) and the embedding lookup (its
// micro-batch's token rows, written by the step's last compute). With the option the table's dense part, every
// micro-batch's head contribution and the lookup's of all but the rank's last micro-batch, is exchanged like any
// unit's right after the last head backward, and the last micro-batch's lookup gradient travels as rows (ids and
// values): either each rank sends each of its distinct rows to the ranks whose optimizer slices hold part of it
// (rows_alltoall: the counts, then an all-to-all-v whose sizes depend on the tokens), or every rank all-gathers
// a fixed T slots of everyone's rows (rows_allgather: sizes independent of the data); every rank adds the parts of
// the rows it receives that fall in its optimizer slice. This file holds the rule (which unit, which
// configurations), the rows' message, their owners, their exchange and its declaration for the plan.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "asynchzp/asynchzp_segments.hpp"
#include "hzp/collectives/communicator.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// The tied table: its unit (one [rows, width] tensor) and the unit whose backward writes it first (the head).
struct TiedTable {
  int unit = -1;
  int head = -1;
  std::int64_t rows = 0, width = 0;
};

using TiedSplit = SchedulerOptions::TiedSplit;

/// The option's value as written in a configuration ("rows_alltoall", ...).
const char* tied_split_name(TiedSplit mode);

/// The table scheduler.tied_split = `mode` splits, or a ConfigError naming the key, the value and the fix: the
/// model has no tied table, pipeline stages (the table's two writers on two stages, whose sum ends the step
/// whatever is split), or a GPU (the rows are read on the host). Context parallelism is served: each rank's rows
/// are its own tokens'.
TiedTable tied_split_table(const workloads::ParamLayout& layout, const ParallelDims& dims, bool on_gpu, TiedSplit mode);

/// The table's elements [begin, end) (counted from its first) whose summed gradient the ranks `ranks` of the
/// rows' group hold: one optimizer slice's part of the table and the ranks holding that slice.
struct TiedOwner {
  std::int64_t begin = 0, end = 0;
  std::vector<int> ranks;
};
/// The owners of every element of `table`, ascending and disjoint, from the optimizer layout (seg.l1, the table's
/// segments starting at `table_offset` in the model) and the optimizer slice of every rank of g.
std::vector<TiedOwner> tied_owners(const TiedTable& table, std::int64_t table_offset, const Segments& seg,
                                   const NestedGroups& g);

/// The rows' exchange, declared for the plan over `group` (W ranks): rows_allgather the ids (int32) and values (the
/// gradient's wire type) of `slots` rows all-gathered; rows_alltoall the row counts (one int64 per rank, an
/// all-to-all), then the ids and the values as all-to-all-v of the expectation for `slots` distinct rows with
/// uniformly spread owners, each row going to the W/z1 ranks holding its optimizer slice: slots·W/z1 rows per
/// rank, the own share included.
void declare_tied_rows(CollectiveLedger& out, const PlanGroup& group, const TiedTable& table, std::int64_t slots,
                       DType wire, TiedSplit mode, int z1);

/// One rank's last micro-batch lookup gradient, as rows, and their exchange.
class TiedRows {
 public:
  /// `slots`: the tokens of a micro-batch on this rank (the most distinct rows it can write; under context
  /// parallelism its share of each sequence); `group`: the ranks whose rows are summed (data × context), used from one thread only; `owners`: tied_owners, in
  /// `group`'s ranks (rows_alltoall sends each row where it is owned).
  TiedRows(TiedTable table, std::int64_t slots, coll::Communicator& group, CachingAllocator& alloc, TiedSplit mode,
           std::vector<TiedOwner> owners);

  const TiedTable& table() const noexcept { return table_; }
  /// The lookup's gradient buffer for the last micro-batch ([rows·width] fp32, accumulate into it): zero outside
  /// the rows take() last read, which it zeroes again.
  TensorView lookup_grad() const;
  /// The last micro-batch's input tokens (before its forward): their distinct ids are the rows it writes.
  void set_tokens(std::span<const std::int32_t> inputs);

  /// The message of one micro-batch: T ids (−1 = empty slot) and T·width values (fp32, or int64 fixed point).
  struct Message {
    std::vector<std::int32_t> ids;
    std::vector<std::byte> values;
    DType dtype = DType::f32;
  };
  /// The rows of lookup_grad() for the tokens last set, converted to fixed point when `fixed` (tallied there);
  /// the buffer is zero again afterwards.
  Message take(FixedPointGrads* fixed);
  /// Every rank's rows exchanged over the group; `add(first_element, values)` is called for each row this rank
  /// receives (width values of the table from element first_element on), in sending rank then slot order:
  /// rows_allgather every row of every rank, rows_alltoall the rows holding part of this rank's optimizer slice
  /// (a row across two owners' slices goes whole to both; each adds its part).
  using AddRow = std::function<void(std::int64_t first_element, const std::byte* values)>;
  void exchange(const Message& mine, const AddRow& add);

 private:
  void gather(const Message& mine, const AddRow& add);
  void to_owners(const Message& mine, const AddRow& add);

  TiedTable table_;
  std::int64_t slots_;
  coll::Communicator* group_;
  TiedSplit mode_;
  std::vector<TiedOwner> owners_;
  Allocation lookup_;                // [rows·width] fp32, zero outside the rows being written
  std::vector<std::int32_t> rows_;   // the last micro-batch's distinct token ids, ascending
};

}  // namespace hzp::schedulers
