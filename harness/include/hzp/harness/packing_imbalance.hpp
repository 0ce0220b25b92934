// Document packing's uneven attention for `hzpbench simulate` (docs/simulate.md "Document packing"): which rows of
// which sequences a rank computes (its data-parallel position picks the micro-batches, BatchPlan; its
// context-parallel position the two chunks of every sequence, ContextShard), and by how much each of its
// micro-batches' attention differs from the same rows without documents (document_causal_pairs). The simulator
// scales only the attention share of a unit's time by that factor; the matmuls see the same tokens either way.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "hzp/schedulers/scheduler_options.hpp"
#include "hzp/workloads/data/document_packing.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::harness {

/// Where a rank's rows come from: the step driver's data-parallel rank (its position in the data-parallel group,
/// which BatchPlan deals micro-batches by) and its position in the context-parallel group. Tensor-parallel ranks
/// and pipeline stages of one such position see the same rows.
struct RankRows {
  int dp = 1, dp_rank = 0;
  int cp = 1, cp_rank = 0;
};

/// Every rank's rows under scheduler `name`'s degrees at `world_size` ranks (scheduler_parallel_dims, the mesh a run
/// builds its groups from; `ranks_per_node` as the topology's), by world rank: one mesh and one pass over its
/// data-parallel groups.
std::vector<RankRows> world_rank_rows(std::string_view name, const schedulers::SchedulerOptions& options,
                                      int world_size, int ranks_per_node);
/// Rank `rank`'s rows (world_rank_rows' entry).
RankRows rank_rows(std::string_view name, const schedulers::SchedulerOptions& options, int world_size,
                   int ranks_per_node, int rank);

/// For each of the rank's micro-batches of step `step`, in its local order (Action::micro_batch): the visible pairs
/// of its rows inside documents over the causal pairs of the same rows as one document, summed over the
/// micro-batch's sequences. Exactly 1 where every sequence is one document.
std::vector<double> attention_factors(const workloads::DocumentPacking& packing, std::int64_t global_batch,
                                      std::int64_t micro_batch_size, std::int64_t seq_len, const RankRows& rows,
                                      std::int64_t step = 0);

/// `shares` (each unit's attention share of its time) with the units that hold no attention zeroed: only the
/// transformer blocks ("block.N") run attention; the embedding and the head do not, whatever their FLOP share says.
std::vector<double> block_attention_shares(const workloads::ParamLayout& layout, std::vector<double> shares);

}  // namespace hzp::harness
