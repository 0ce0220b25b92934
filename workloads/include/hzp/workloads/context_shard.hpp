// How context parallelism splits every sequence over a group of cp ranks, balanced for causal attention: the
// sequence is cut into 2·cp equal chunks and rank r holds chunks r and 2·cp − 1 − r, an early chunk (whose
// queries see few keys) with a late one (whose queries see many), so every rank does the same attention work.
// A rank's tokens of a sequence are its two chunks, in that order; their positions (for RoPE) are the global
// ones. The loss normaliser is unchanged: it still counts every target token of the global batch once, so the
// ranks' partial losses add up to the global mean.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hzp::workloads {

class ContextShard {
 public:
  /// Rank `rank` of a context-parallel group of `cp` over sequences of `seq_len` tokens. ConfigError naming
  /// model.seq_len and scheduler.cp unless 2·cp divides seq_len; PreconditionError for a rank outside the group.
  ContextShard(std::int64_t seq_len, int cp, int rank);

  int cp() const noexcept { return cp_; }
  int rank() const noexcept { return rank_; }
  std::int64_t seq_len() const noexcept { return seq_len_; }
  /// Tokens in one chunk: seq_len / (2·cp).
  std::int64_t chunk_len() const noexcept { return seq_len_ / (2 * cp_); }
  /// Tokens of one sequence this rank holds: 2 · chunk_len().
  std::int64_t local_len() const noexcept { return 2 * chunk_len(); }
  /// The global chunk index of this rank's local chunk c (0: chunk r, 1: chunk 2·cp − 1 − r).
  int chunk(int c) const noexcept { return c == 0 ? rank_ : 2 * cp_ - 1 - rank_; }
  /// The global position of the rank's local token i of a sequence (0 <= i < local_len()).
  std::int64_t position(std::int64_t i) const noexcept {
    return chunk(i < chunk_len() ? 0 : 1) * chunk_len() + i % chunk_len();
  }
  /// The positions of the rank's tokens of `batch` sequences, row after row ([batch · local_len()], int32), as
  /// RoPE with explicit positions reads them.
  std::vector<std::int32_t> positions(std::int64_t batch) const;
  /// The rank's tokens of `batch` whole sequences: `whole` [batch, seq_len] → `mine` [batch, local_len()].
  void take(std::span<const std::int32_t> whole, std::span<std::int32_t> mine, std::int64_t batch) const;

 private:
  std::int64_t seq_len_;
  int cp_, rank_;
};

}  // namespace hzp::workloads
