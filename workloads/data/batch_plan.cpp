// BatchPlan's validation and index arithmetic, and filling a micro-batch's inputs and targets.
#include "hzp/workloads/batch_plan.hpp"

#include <algorithm>
#include <string>

#include "hzp/core/error.hpp"
#include "hzp/workloads/data/document_packing.hpp"

namespace hzp::workloads {
namespace {

// "e.g. 8 or 16": the multiples of `unit` on either side of `g` (g is not one); only the one above when
// none lies below.
std::string nearest_multiples(std::int64_t g, std::int64_t unit) {
  const std::int64_t below = g / unit * unit, above = below + unit;
  return below > 0 ? "e.g. " + std::to_string(below) + " or " + std::to_string(above) : "e.g. " + std::to_string(above);
}

}  // namespace

BatchPlan::BatchPlan(std::int64_t g, std::int64_t m, std::int64_t dp)
    : global_batch_(g), micro_batch_size_(m), dp_(dp) {
  if (g < 1 || m < 1 || dp < 1)
    HZP_THROW(ConfigError, "batch split: train.global_batch=", g, ", train.micro_batch_size=", m,
              " and the data-parallel size dp=", dp, " must all be ≥ 1");
  if (g % m != 0)
    HZP_THROW(ConfigError, "batch split: train.global_batch=", g, " is not a multiple of ",
              "train.micro_batch_size=", m, " (dp=", dp, "): set train.global_batch to a multiple of ", m,
              " (", nearest_multiples(g, m), ") or train.micro_batch_size to a divisor of ", g);
  const std::int64_t n = g / m;
  if (n % dp != 0) {
    const std::int64_t unit = m * dp;
    HZP_THROW(ConfigError, "batch split: train.global_batch=", g, " / train.micro_batch_size=", m, " = ", n,
              " micro-batches per step, which the data-parallel size dp=", dp, " does not divide ",
              "(every rank must process the same number of micro-batches): set train.global_batch to a ",
              "multiple of train.micro_batch_size·dp = ", unit, " (", nearest_multiples(g, unit),
              "), or use a data-parallel size that divides ", n);
  }
}

std::int64_t BatchPlan::first_sample(std::int64_t step, std::int64_t j) const {
  HZP_CHECK(step >= 0, "step=", step, " is negative");
  HZP_CHECK(j >= 0 && j < micro_batches_per_step(), "micro-batch j=", j, " outside [0, ",
            micro_batches_per_step(), ")");
  return step * global_batch_ + j * micro_batch_size_;
}

std::int64_t BatchPlan::rank_of(std::int64_t j) const {
  HZP_CHECK(j >= 0 && j < micro_batches_per_step(), "micro-batch j=", j, " outside [0, ",
            micro_batches_per_step(), ")");
  return j % dp_;
}

std::int64_t BatchPlan::micro_batch_of(std::int64_t rank, std::int64_t i) const {
  HZP_CHECK(rank >= 0 && rank < dp_, "rank=", rank, " outside [0, dp=", dp_, ")");
  HZP_CHECK(i >= 0 && i < micro_batches_per_rank(), "local micro-batch i=", i, " outside [0, ",
            micro_batches_per_rank(), ")");
  return rank + i * dp_;
}

std::vector<std::int64_t> BatchPlan::micro_batches_of(std::int64_t rank) const {
  std::vector<std::int64_t> out;
  out.reserve(micro_batches_per_rank());
  for (std::int64_t i = 0; i < micro_batches_per_rank(); ++i) out.push_back(micro_batch_of(rank, i));
  return out;
}

void fill_micro_batch(const DataSource& source, const BatchPlan& plan, std::int64_t step,
                      std::int64_t micro_batch, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets) {
  const std::int64_t t = source.seq_len(), m = plan.micro_batch_size();
  HZP_CHECK(std::int64_t(inputs.size()) == m * t && std::int64_t(targets.size()) == m * t,
            "a micro-batch is [micro_batch_size=", m, ", seq_len=", t, "] = ", m * t,
            " tokens; got inputs of ", inputs.size(), " and targets of ", targets.size());
  const std::int64_t first = plan.first_sample(step, micro_batch);
  std::vector<std::int32_t> x(t + 1);
  for (std::int64_t b = 0; b < m; ++b) {
    source.sample(first + b, x);
    std::copy(x.begin(), x.end() - 1, inputs.begin() + b * t);
    std::copy(x.begin() + 1, x.end(), targets.begin() + b * t);
  }
}

}  // namespace hzp::workloads

namespace hzp::workloads {

void fill_micro_batch(const DataSource& source, const BatchPlan& plan, std::int64_t step, std::int64_t micro_batch,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets, std::span<std::int32_t> first) {
  fill_micro_batch(source, plan, step, micro_batch, inputs, targets);
  const std::int64_t t = source.seq_len(), m = plan.micro_batch_size();
  HZP_CHECK(std::int64_t(first.size()) == m * t, "a micro-batch's document starts are [micro_batch_size=", m,
            ", seq_len=", t, "] = ", m * t, " positions; got ", first.size());
  const std::int64_t sample = plan.first_sample(step, micro_batch);
  for (std::int64_t b = 0; b < m; ++b)
    document_first_positions(source.document_starts(sample + b), t, first.subspan(b * t, t));
}

double micro_batch_attention_pairs(const DataSource& source, const BatchPlan& plan, std::int64_t step,
                                   std::int64_t micro_batch, const ContextShard* shard) {
  const std::int64_t t = source.seq_len(), sample = plan.first_sample(step, micro_batch);
  double pairs = 0;
  for (std::int64_t b = 0; b < plan.micro_batch_size(); ++b) {
    const std::vector<std::int32_t> starts = source.document_starts(sample + b);
    if (shard == nullptr) {
      pairs += document_causal_pairs(starts, t, 0, t);
      continue;
    }
    for (int c = 0; c < 2; ++c) {
      const std::int64_t begin = shard->chunk(c) * shard->chunk_len();
      pairs += document_causal_pairs(starts, t, begin, begin + shard->chunk_len());
    }
  }
  return pairs;
}

}  // namespace hzp::workloads
