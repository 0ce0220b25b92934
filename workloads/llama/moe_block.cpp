// The routed half of an MoE block inside the decoder (llama_model.hpp): its weights read from the block, the
// balancing bias handed to the router, the routing statistics recorded per step, and the step-end update of
// the bias from the global batch's load (the Workload's take_step_statistics / end_step hook).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "hzp/core/error.hpp"
#include "llama/llama_model.hpp"

namespace hzp::workloads::llama {
namespace {

// The routed experts are an MoE block's last four tensors (llama_layout): router, w_gate, w_up, w_down.
constexpr int kRoutedTensors = 4;

}  // namespace

MoeBalanceState::MoeBalanceState(const MoeConfig& config, std::int64_t moe_layers)
    : config_(config),
      layers_(moe_layers),
      bias_(static_cast<std::size_t>(moe_layers * config.experts), 0.0),
      counts_(static_cast<std::size_t>(moe_layers * (config.experts + 2)), 0.0) {}

std::vector<double> MoeBalanceState::bias(std::int64_t layer) const {
  if (config_.balance != MoeBalance::bias) return {};
  const std::lock_guard lock(mutex_);
  const auto b = bias_.begin() + layer * config_.experts;
  return {b, b + config_.experts};
}

void MoeBalanceState::record(std::int64_t layer, const MoeRouting& routing, double weighted_aux) {
  const std::lock_guard lock(mutex_);
  const std::int64_t E = config_.experts;
  for (std::int64_t e = 0; e < E; ++e)
    counts_[static_cast<std::size_t>(layer * E + e)] += static_cast<double>(routing.load[static_cast<std::size_t>(e)]);
  counts_[static_cast<std::size_t>(layers_ * E + layer)] += static_cast<double>(routing.dropped);
  counts_[static_cast<std::size_t>(layers_ * (E + 1) + layer)] += weighted_aux;
}

std::vector<double> MoeBalanceState::take() {
  const std::lock_guard lock(mutex_);
  std::vector<double> out = counts_;
  std::fill(counts_.begin(), counts_.end(), 0.0);
  return out;
}

void MoeBalanceState::end_step(std::span<const double> global) {
  HZP_CHECK(global.size() == counts_.size(), "MoE end_step: ", global.size(), " statistics, expected ",
            counts_.size());
  const std::lock_guard lock(mutex_);
  const std::int64_t E = config_.experts;
  if (config_.balance == MoeBalance::bias)
    for (std::int64_t l = 0; l < layers_; ++l) {
      const auto at = static_cast<std::size_t>(l * E);
      const std::span<const double> load = global.subspan(at, static_cast<std::size_t>(E));
      // A layer this rank's pipeline stage does not hold has no load anywhere in its group: left alone.
      if (std::all_of(load.begin(), load.end(), [](double v) { return v == 0; })) continue;
      update_balance_bias(std::span<double>(bias_).subspan(at, static_cast<std::size_t>(E)), load,
                          config_.bias_update_rate);
    }
  last_.assign(global.begin(), global.end());
}

std::vector<double> MoeBalanceState::last_step() const {
  const std::lock_guard lock(mutex_);
  std::vector<double> out = last_;
  out.insert(out.end(), bias_.begin(), bias_.end());
  return out;
}

std::vector<double> MoeBalanceState::saved_bias() const {
  if (config_.balance != MoeBalance::bias) return {};
  const std::lock_guard lock(mutex_);
  return bias_;
}

void MoeBalanceState::restore_bias(std::span<const double> bias) {
  const std::size_t want = config_.balance == MoeBalance::bias ? bias_.size() : 0;
  if (bias.size() != want)
    HZP_THROW(DataError, "model.state (the MoE balancing bias) holds ", bias.size(), " numbers but this model's ",
              layers_, " MoE layers of ", config_.experts, " experts under model.balance = ", to_string(config_.balance),
              " need ", want, " (a checkpoint of another model or balancing rule)");
  const std::lock_guard lock(mutex_);
  std::copy(bias.begin(), bias.end(), bias_.begin());
}

std::vector<double> LlamaModel::checkpoint_state() const {
  if (!config_.moe.enabled()) return {};
  std::vector<double> bias = balance_.saved_bias();
  // A pipeline stage updates the bias of its own layers only (end_step leaves the others alone): the others are 0
  // here, so that the stages' lists add up to the whole model's (Workload::checkpoint_state).
  const std::int64_t E = config_.moe.experts;
  for (std::int64_t m = 0; m * E < static_cast<std::int64_t>(bias.size()); ++m)
    if (!layout().unit(static_cast<int>(m + 1 + config_.moe.dense_layers)).runs)
      std::fill(bias.begin() + m * E, bias.begin() + (m + 1) * E, 0.0);
  return bias;
}

void LlamaModel::restore_checkpoint_state(std::span<const double> state) const {
  if (config_.moe.enabled()) balance_.restore_bias(state);
  else Workload::restore_checkpoint_state(state);
}

std::vector<double> LlamaModel::take_step_statistics() const {
  return config_.moe.enabled() ? balance_.take() : std::vector<double>{};
}

void LlamaModel::end_step(std::span<const double> global) const {
  if (config_.moe.enabled()) balance_.end_step(global);
}

std::vector<StepMetric> LlamaModel::step_metrics() const {
  if (!config_.moe.enabled()) return {};
  const std::vector<double> all = balance_.last_step();
  const std::int64_t L = balance_.layers(), E = config_.moe.experts;
  if (static_cast<std::int64_t>(all.size()) < L * (E + 2)) return {};  // no step has ended yet
  auto part = [&](std::int64_t begin, std::int64_t n) {
    return std::vector<double>(all.begin() + begin, all.begin() + begin + n);
  };
  std::vector<double> ratio;
  for (std::int64_t l = 0; l < L; ++l) {
    const auto b = all.begin() + l * E;
    const double mx = *std::max_element(b, b + E), sum = std::accumulate(b, b + E, 0.0);
    ratio.push_back(sum > 0 ? mx / (sum / static_cast<double>(E)) : 0.0);
  }
  std::vector<StepMetric> m = {
      {"moe/load", "assignments",
       "assignments routed to each expert over the global batch (before capacity), [MoE layer, expert] flattened",
       part(0, L * E)},
      {"moe/load_max_over_mean", "1", "per MoE layer: the most loaded expert's load over the mean load", ratio},
      {"moe/dropped", "assignments", "per MoE layer: assignments dropped beyond model.capacity_factor's capacity",
       part(L * E, L)}};
  if (config_.moe.balance == MoeBalance::aux_loss)
    m.push_back({"moe/aux_loss", "nats/token",
                 "per MoE layer: its auxiliary loss term in the objective (not in steps/loss)", part(L * (E + 1), L)});
  else
    m.push_back({"moe/bias", "1", "the balancing bias after the step's update, [MoE layer, expert] flattened",
                 part(L * (E + 2), L * E)});
  return m;
}

MoeTokenRows LlamaModel::moe_rows(const LlamaContext& ctx) const {
  if (tp_ == nullptr) return {};
  // Under tensor parallelism every rank holds (or has gathered) every token after the block's attention; as in
  // Megatron-Core with expert tensor parallelism 1, the group splits the rows for the routed experts, rank t taking
  // the same rows sequence parallelism gives it, so the routed output and input gradient are row shares that the
  // block's existing sums over the group complete.
  const std::int64_t n = ctx.tokens() / tp_size_;
  return {tp_rank_ * n, (tp_rank_ + 1) * n};
}

namespace {
// Rows [rows.begin, rows.end) of a [tokens, d] tensor (all of it when rows.all()).
template <class View>
View rows_of(View v, MoeTokenRows rows) {
  if (rows.all() || v.data() == nullptr) return v;
  const std::int64_t d = v.shape()[1];
  using Byte = std::conditional_t<std::is_same_v<View, TensorView>, std::byte, const std::byte>;
  return View(static_cast<Byte*>(v.data()) + rows.begin * d * static_cast<std::int64_t>(dtype_size(v.dtype())),
              Shape{rows.end - rows.begin, d}, v.dtype(), v.device());
}
}  // namespace

void LlamaModel::moe_forward(int unit, const UnitParams& params, LlamaContext& ctx, BlockActs& s, TensorView y) const {
  const ConstTensorView block = params.block(unit);
  const int first = static_cast<int>(layout().unit(unit).tensors.size()) - kRoutedTensors;
  auto w = [&](int t) { return tensor_in_block(layout(), unit, first + t, block); };
  const std::int64_t layer = unit - 1 - config_.moe.dense_layers;
  // The auxiliary loss of a micro-batch enters the objective weighted by its share of the global batch's tokens,
  // as its cross-entropy does, so the micro-batches' terms add up to one mean over the batch at any world size.
  const double aux_weight =
      config_.moe.balance == MoeBalance::aux_loss ? static_cast<double>(ctx.tokens()) / ctx.normaliser() : 0.0;
  const MoeTokenRows rows = moe_rows(ctx);
  moe_experts_forward(config_.moe, s.h2.view, {w(0), w(1), w(2), w(3)}, balance_.bias(layer), aux_weight,
                      rows_of(y, rows), s.moe, ctx.allocator(), ctx.stream(), ep_, rows);
  if (y.data() != nullptr) balance_.record(layer, s.moe.routing, s.moe.aux * aux_weight);
}

void LlamaModel::moe_backward(int unit, const UnitParams& params, LlamaContext& ctx, BlockActs& s,
                              const UnitGrads& grads, ConstTensorView dy, TensorView dh2) const {
  const ConstTensorView block = params.block(unit);
  const UnitGrads::Block& gb = grads.block(unit);
  const int first = static_cast<int>(layout().unit(unit).tensors.size()) - kRoutedTensors;
  auto w = [&](int t) { return tensor_in_block(layout(), unit, first + t, block); };
  auto dw = [&](int t) { return tensor_in_block(layout(), unit, first + t, gb.view); };
  // Under sequence parallelism dy is already the rank's rows; h2 and dh2 cover every token.
  const MoeTokenRows rows = moe_rows(ctx);
  moe_experts_backward(config_.moe, sp_ ? dy : rows_of(dy, rows), rows_of(ConstTensorView(s.h2.view), rows),
                       {w(0), w(1), w(2), w(3)}, {dw(0), dw(1), dw(2), dw(3), gb.accumulate}, rows_of(dh2, rows), s.moe,
                       ctx.allocator(), ctx.stream(), ep_);
}

}  // namespace hzp::workloads::llama
