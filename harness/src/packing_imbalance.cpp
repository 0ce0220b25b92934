// Document packing's per-rank attention factors (packing_imbalance.hpp): the rank's rows from the run's mesh, the
// visible pairs inside documents from DocumentPacking::starts, both counted as the step driver deals the data.
#include "hzp/harness/packing_imbalance.hpp"

#include <algorithm>
#include <string>

#include "hzp/collectives/topology.hpp"
#include "hzp/core/error.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "hzp/workloads/context_shard.hpp"

namespace hzp::harness {

std::vector<RankRows> world_rank_rows(std::string_view name, const schedulers::SchedulerOptions& options,
                                      int world_size, int ranks_per_node) {
  const schedulers::ParallelDims dims = schedulers::scheduler_parallel_dims(name, options, world_size);
  const coll::RankMesh mesh = dims.mesh(coll::Topology::virtual_nodes(world_size, ranks_per_node, 0));
  std::vector<RankRows> out(static_cast<std::size_t>(world_size));
  // The step driver's rank is the rank's place in its data-parallel group (rank order, as the split keys it).
  for (const std::vector<int>& dp : mesh.groups(schedulers::data_parallel_axes()))
    for (std::size_t i = 0; i < dp.size(); ++i) {
      RankRows& r = out[static_cast<std::size_t>(dp[i])];
      r.dp = static_cast<int>(dp.size());
      r.dp_rank = static_cast<int>(i);
      r.cp = dims.cp;
      r.cp_rank = dims.cp > 1 ? mesh.position(schedulers::kAxisContext, dp[i]) : 0;
    }
  return out;
}

RankRows rank_rows(std::string_view name, const schedulers::SchedulerOptions& options, int world_size,
                   int ranks_per_node, int rank) {
  HZP_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " is not in a world of ", world_size);
  return world_rank_rows(name, options, world_size, ranks_per_node)[static_cast<std::size_t>(rank)];
}

std::vector<double> attention_factors(const workloads::DocumentPacking& packing, std::int64_t global_batch,
                                      std::int64_t micro_batch_size, std::int64_t seq_len, const RankRows& rows,
                                      std::int64_t step) {
  const workloads::BatchPlan plan(global_batch, micro_batch_size, rows.dp);
  // The rows of every sequence the rank holds: all of them, or its two load-balanced chunks.
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  if (rows.cp > 1) {
    const workloads::ContextShard shard(seq_len, rows.cp, rows.cp_rank);
    for (int c = 0; c < 2; ++c) {
      const std::int64_t begin = shard.chunk(c) * shard.chunk_len();
      spans.emplace_back(begin, begin + shard.chunk_len());
    }
  } else {
    spans.emplace_back(0, seq_len);
  }
  const std::vector<std::int32_t> whole{0};  // one document: the unpacked causal pairs
  double unpacked = 0;
  for (const auto& [a, b] : spans) unpacked += workloads::document_causal_pairs(whole, seq_len, a, b);
  unpacked *= static_cast<double>(micro_batch_size);
  std::vector<double> out;
  for (const std::int64_t j : plan.micro_batches_of(rows.dp_rank)) {
    double pairs = 0;
    for (std::int64_t b = 0; b < micro_batch_size; ++b) {
      const std::vector<std::int32_t> starts = packing.starts(plan.first_sample(step, j) + b, seq_len);
      for (const auto& [a, e] : spans) pairs += workloads::document_causal_pairs(starts, seq_len, a, e);
    }
    out.push_back(pairs / unpacked);
  }
  return out;
}

std::vector<double> block_attention_shares(const workloads::ParamLayout& layout, std::vector<double> shares) {
  for (int u = 0; u < layout.num_units() && u < static_cast<int>(shares.size()); ++u)
    if (!layout.unit(u).name.starts_with("block.")) shares[static_cast<std::size_t>(u)] = 0;
  return shares;
}

}  // namespace hzp::harness
