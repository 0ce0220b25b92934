// How a step's sequences are split into micro-batches and dealt to data-parallel ranks
// (docs/data.md "Batches"). Micro-batch j of step s holds samples s·G + j·M … s·G + j·M + M − 1 (G =
// train.global_batch, M = train.micro_batch_size) and goes to rank j mod dp; the micro-batch shape
// [M, T] never depends on the world size, which is what makes runs at different W comparable.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hzp/workloads/context_shard.hpp"
#include "hzp/workloads/data_source.hpp"

namespace hzp::workloads {

/// Validated batch split. Immutable; all members are cheap and thread-safe.
class BatchPlan {
 public:
  /// ConfigError unless G ≥ 1, M ≥ 1, dp ≥ 1, M divides G and dp divides G/M; the message names
  /// train.global_batch, train.micro_batch_size, dp and the counts, and says how to fix them.
  BatchPlan(std::int64_t global_batch, std::int64_t micro_batch_size, std::int64_t dp = 1);

  std::int64_t global_batch() const { return global_batch_; }
  std::int64_t micro_batch_size() const { return micro_batch_size_; }
  std::int64_t dp() const { return dp_; }
  /// G / M.
  std::int64_t micro_batches_per_step() const { return global_batch_ / micro_batch_size_; }
  /// G / (M·dp): every rank processes the same number.
  std::int64_t micro_batches_per_rank() const { return micro_batches_per_step() / dp_; }

  /// Global index of the first sample of micro-batch j (∈ [0, G/M)) of step s (≥ 0): s·G + j·M.
  std::int64_t first_sample(std::int64_t step, std::int64_t micro_batch) const;
  /// The data-parallel rank that processes micro-batch j: j mod dp.
  std::int64_t rank_of(std::int64_t micro_batch) const;
  /// The i-th micro-batch (i ∈ [0, G/(M·dp))) rank r processes, in order: r + i·dp.
  std::int64_t micro_batch_of(std::int64_t rank, std::int64_t local_index) const;
  /// All micro-batch indices of rank r, in processing order: r, r + dp, r + 2·dp, …
  std::vector<std::int64_t> micro_batches_of(std::int64_t rank) const;

 private:
  std::int64_t global_batch_, micro_batch_size_, dp_;
};

/// Fills micro-batch j of step s: inputs and targets (out) are row-major [M, T] int32 with
/// T = source.seq_len(); row b comes from sample x = source.sample(first_sample(s, j) + b):
/// inputs[b, :] = x[0..T−1], targets[b, :] = x[1..T]. PreconditionError on wrong span sizes.
/// Thread-safe (as the source is); deterministic in (s, j) alone.
void fill_micro_batch(const DataSource& source, const BatchPlan& plan, std::int64_t step,
                      std::int64_t micro_batch, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets);

/// The same, and `first` [M, T]: each input position's document start in its sequence (document_first_positions
/// of source.document_starts(sample)), what MicroBatchContext::begin and attention's masking take.
void fill_micro_batch(const DataSource& source, const BatchPlan& plan, std::int64_t step,
                      std::int64_t micro_batch, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets, std::span<std::int32_t> first);

/// The (query, key) position pairs attention inside documents visits for micro-batch j of step s: summed over its
/// M sequences, document_causal_pairs of the query rows this rank holds (the whole sequence, or under context
/// parallelism the shard's two chunks). Per pair of positions: not multiplied by heads or layers. Without packing
/// M·T(T+1)/2 (or the shard's share).
double micro_batch_attention_pairs(const DataSource& source, const BatchPlan& plan, std::int64_t step,
                                   std::int64_t micro_batch, const ContextShard* shard = nullptr);

}  // namespace hzp::workloads
