// ContextShard (context_shard.hpp): the load-balanced chunks of a context-parallel rank.
#include "hzp/workloads/context_shard.hpp"

#include <algorithm>

#include "hzp/core/error.hpp"

namespace hzp::workloads {

ContextShard::ContextShard(std::int64_t seq_len, int cp, int rank) : seq_len_(seq_len), cp_(cp), rank_(rank) {
  if (cp < 1 || seq_len < 1 || seq_len % (2 * static_cast<std::int64_t>(cp)) != 0)
    HZP_THROW(ConfigError, "context parallelism: model.seq_len = ", seq_len, " must divide into 2 · scheduler.cp = ",
              2 * static_cast<std::int64_t>(cp), " equal chunks (each rank holds an early and a late one, so every "
              "rank does the same causal attention work). Fix: a sequence length that is a multiple of ", 2 * cp,
              ", or another scheduler.cp");
  HZP_CHECK(rank >= 0 && rank < cp, "context shard: rank ", rank, " of a group of ", cp);
}

std::vector<std::int32_t> ContextShard::positions(std::int64_t batch) const {
  std::vector<std::int32_t> out(static_cast<std::size_t>(batch * local_len()));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < local_len(); ++i)
      out[static_cast<std::size_t>(b * local_len() + i)] = static_cast<std::int32_t>(position(i));
  return out;
}

void ContextShard::take(std::span<const std::int32_t> whole, std::span<std::int32_t> mine, std::int64_t batch) const {
  HZP_CHECK(static_cast<std::int64_t>(whole.size()) == batch * seq_len_ &&
                static_cast<std::int64_t>(mine.size()) == batch * local_len(),
            "context shard: ", whole.size(), " tokens in and ", mine.size(), " out for ", batch, " sequences of ",
            seq_len_, " (", local_len(), " of each on this rank)");
  const std::int64_t n = chunk_len();
  for (std::int64_t b = 0; b < batch; ++b)
    for (int c = 0; c < 2; ++c) {
      const auto from = whole.begin() + static_cast<std::ptrdiff_t>(b * seq_len_ + chunk(c) * n);
      std::copy(from, from + static_cast<std::ptrdiff_t>(n),
                mine.begin() + static_cast<std::ptrdiff_t>(b * local_len() + c * n));
    }
}

}  // namespace hzp::workloads
