// Dataset names, units and descriptions of the per-step rows, and their appending (results_rows.hpp).
#include "results_rows.hpp"

#include <string>
#include <vector>

namespace hzp::harness {
namespace {

// steps/*: one value per step. Names are part of the results contract (docs/results-schema.md).
const SeriesSpec kLoss{"steps/loss", "nats/token", "mean training loss over the step's global batch"};
const SeriesSpec kGradNorm{"steps/grad_norm", "1", "global gradient norm before clipping"};
const SeriesSpec kLr{"steps/lr", "1", "learning rate of the step's update"};
const SeriesSpec kClip{"steps/clip_coefficient", "1", "factor the update scaled gradients by (1 = no clipping)"};
const SeriesSpec kTokens{"steps/tokens", "tokens", "target tokens of the global batch"};
const SeriesSpec kStepTime{"steps/step_time_s", "s", "step wall time, the maximum over ranks"};
const SeriesSpec kTokensPerS{"steps/tokens_per_s", "tokens/s", "global tokens over the step time"};
const SeriesSpec kModelFlops{"steps/model_flops", "FLOP",
                             "model FLOPs of the step (6N_matmul + 12LHdT per token, attention not discounted)"};
const SeriesSpec kMfu{"steps/mfu", "1",
                      "model FLOPs utilisation against world_size x device.peak_flops_per_rank (attention not discounted)"};
const SeriesSpec kMfuCausal{"steps/mfu_causal", "1", "MFU with the attention FLOPs halved (causal mask)"};
const SeriesSpec kExposed{"steps/exposed_comm_frac", "1", "mean over ranks of exposed_comm_s / step_time_s"};
const SeriesSpec kSpread{"steps/rank_spread", "1", "(max - min) / median of the ranks' step times"};
const SeriesSpec kLossZ{"steps/loss_z", "1",
                        "z-score of the loss against the trailing window (NaN until 5 steps are known)"};
const SeriesSpec kGradZ{"steps/grad_norm_z", "1", "z-score of the gradient norm against the trailing window"};
const SeriesSpec kLossSpike{"steps/loss_spike", "1", "1 when loss_z exceeds harness.spike_threshold"};
const SeriesSpec kGradSpike{"steps/grad_norm_spike", "1", "1 when grad_norm_z exceeds harness.spike_threshold"};
const SeriesSpec kRetries{"steps/retries", "1",
                          "deterministic mode: times the step was rerun with larger fixed-point scales (0 otherwise)"};
const SeriesSpec kSkipped{"steps/skipped", "1", "1 when the loss was non-finite and tolerated (harness.skip_nonfinite)"};

SeriesSpec rank_spec(RankField f) {
  const FieldInfo& i = field_info(f);
  return {"ranks/" + std::string(i.name), std::string(i.units), std::string(i.description)};
}

SeriesSpec comm_spec(int op, int level, int stat) {
  const std::string base = "comm/" + std::string(coll::coll_op_name(static_cast<coll::CollOp>(op))) + "/" +
                           std::string(coll::link_level_name(static_cast<coll::LinkLevel>(level))) + "/";
  static const char* const units[kCommStats] = {"1", "bytes", "s"};
  static const char* const what[kCommStats] = {
      "collectives of this op that moved bytes on this link level during the step",
      "bytes this rank sent on this link level during the step",
      "summed duration of those collectives"};
  return {base + std::string(kCommStatNames[stat]), units[stat], what[stat]};
}

}  // namespace

void ResultsRows::append(ResultsWriter& w, const StepRecord& r, std::span<const RankSample> samples) {
  w.append(kLoss, r.loss);
  w.append(kGradNorm, r.grad_norm);
  w.append(kLr, r.lr);
  w.append(kClip, r.clip_coefficient);
  w.append(kTokens, static_cast<std::int64_t>(r.tokens));
  w.append(kStepTime, r.step_time_s);
  w.append(kTokensPerS, r.tokens_per_s);
  w.append(kModelFlops, r.model_flops);
  w.append(kMfu, r.mfu);
  w.append(kMfuCausal, r.mfu_causal);
  w.append(kExposed, r.exposed_comm_frac);
  w.append(kSpread, r.rank_spread);
  w.append(kLossZ, r.loss_z);
  w.append(kGradZ, r.grad_norm_z);
  w.append(kLossSpike, std::int64_t{r.loss_spike});
  w.append(kGradSpike, std::int64_t{r.grad_norm_spike});
  w.append(kSkipped, std::int64_t{r.skipped});
  w.append(kRetries, static_cast<std::int64_t>(r.retries));

  std::vector<double> row(static_cast<std::size_t>(world_size_));
  std::vector<std::int64_t> irow(row.size());
  for (int f = 0; f < kNumRankFields; ++f) {
    const auto field = static_cast<RankField>(f);
    if (!has_pool_ && (field == RankField::pool_occupancy || field == RankField::pool_stalls)) continue;
    const FieldInfo& info = field_info(field);
    if (info.integer) {
      for (std::size_t q = 0; q < row.size(); ++q) irow[q] = static_cast<std::int64_t>(samples[q][field]);
      w.append_row(rank_spec(field), irow);
    } else {
      for (std::size_t q = 0; q < row.size(); ++q) row[q] = samples[q][field];
      w.append_row(rank_spec(field), row);
    }
  }

  for (int op = 0; op < coll::kNumCollOps; ++op)
    for (int level = 0; level < coll::kNumLinkLevels; ++level) {
      const auto o = static_cast<coll::CollOp>(op);
      const auto l = static_cast<coll::LinkLevel>(level);
      bool any = false;
      for (const RankSample& s : samples) any = any || s.comm(o, l, 0) > 0;
      const bool seen = comm_seen_.count({op, level}) > 0;
      if (!any && !seen) continue;
      for (int stat = 0; stat < kCommStats; ++stat) {
        const SeriesSpec spec = comm_spec(op, level, stat);
        const bool integer = stat < 2;
        if (!seen) {  // earlier steps had no such collective: their rows are zeros
          const std::vector<double> zeros(row.size(), 0.0);
          const std::vector<std::int64_t> izeros(row.size(), 0);
          for (std::int64_t k = 0; k < rows_; ++k) integer ? w.append_row(spec, izeros) : w.append_row(spec, zeros);
        }
        for (std::size_t q = 0; q < row.size(); ++q) {
          row[q] = samples[q].comm(o, l, stat);
          irow[q] = static_cast<std::int64_t>(row[q]);
        }
        integer ? w.append_row(spec, irow) : w.append_row(spec, row);
      }
      comm_seen_.insert({op, level});
    }
  ++rows_;
}

}  // namespace hzp::harness
