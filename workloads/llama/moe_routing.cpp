// The MoE router and balancing rules (moe.hpp): the keys' checks, top-k routing with capacity, DeepSeek-V3's
// bias update and the switch-style auxiliary loss. Plain host arithmetic in fp64, so the routing of a
// micro-batch is the same whatever the activation dtype rounded the logits to.
#include <algorithm>
#include <cmath>
#include <string>

#include "hzp/core/error.hpp"
#include "hzp/workloads/moe.hpp"

namespace hzp::workloads {

std::string_view to_string(RouterScore s) noexcept { return name_of(kRouterScoreNames, s); }
std::string_view to_string(MoeBalance b) noexcept { return name_of(kMoeBalanceNames, b); }

RouterScore router_score_from(std::string_view name, std::string_view key) {
  if (const auto s = value_of(kRouterScoreNames, name)) return *s;
  HZP_THROW(ConfigError, key, " = \"", name, "\" is not a router score; choices: ", names_text(kRouterScoreNames));
}

MoeBalance moe_balance_from(std::string_view name, std::string_view key) {
  if (const auto b = value_of(kMoeBalanceNames, name)) return *b;
  HZP_THROW(ConfigError, key, " = \"", name, "\" is not a balancing rule; choices: ", names_text(kMoeBalanceNames));
}

void MoeConfig::collect_problems(std::int64_t layers, std::vector<std::string>& problems) const {
  auto add = [&](auto&&... parts) { problems.push_back(detail::concat(parts...)); };
  if (experts < 0) add("model.experts = ", experts, " must be >= 0 (0 = a dense model); fix: 0, or the routed experts per layer");
  if (!enabled()) return;
  if (top_k < 1 || top_k > experts)
    add("model.top_k = ", top_k, " must be between 1 and model.experts = ", experts,
        "; fix: route each token to at most as many experts as there are");
  if (expert_ffn <= 0)
    add("model.expert_ffn = ", expert_ffn, " must be positive when model.experts = ", experts,
        "; fix: the SwiGLU width of one expert, e.g. model.ffn_hidden / model.top_k");
  if (shared_experts < 0) add("model.shared_experts = ", shared_experts, " must be >= 0; fix: 0 for none");
  if (dense_layers < 0 || dense_layers > layers)
    add("model.dense_layers = ", dense_layers, " must be between 0 and model.layers = ", layers,
        "; fix: the number of leading blocks that keep the dense MLP");
  if (capacity_factor != 0 && (!(capacity_factor >= 1.0) || !std::isfinite(capacity_factor)))
    add("model.capacity_factor = ", capacity_factor, " must be 0 (dropless) or a finite number >= 1 (below 1 an "
        "evenly balanced batch would already drop tokens); fix: 0, or e.g. 1.25");
  if (!(bias_update_rate >= 0) || !std::isfinite(bias_update_rate))
    add("model.bias_update_rate = ", bias_update_rate, " must be finite and >= 0; fix: e.g. 0.001 (DeepSeek-V3's)");
  if (!(aux_loss_coef >= 0) || !std::isfinite(aux_loss_coef))
    add("model.aux_loss_coef = ", aux_loss_coef, " must be finite and >= 0; fix: e.g. 0.01 (Switch Transformer's)");
}

void check_moe_token_split(const MoeConfig& c, std::string_view key, int degree) {
  if (!c.enabled() || degree <= 1) return;
  if (c.capacity_factor > 0)
    HZP_THROW(ConfigError, key, " = ", degree, " splits each micro-batch's tokens over ", degree, " ranks, but "
              "model.capacity_factor = ", c.capacity_factor, " admits assignments in the order of the whole "
              "micro-batch's tokens, which no rank holds; fix: model.capacity_factor = 0 (dropless), or ", key, " = 1");
  if (c.balance == MoeBalance::aux_loss)
    HZP_THROW(ConfigError, key, " = ", degree, " splits each micro-batch's tokens over ", degree, " ranks, but "
              "model.balance = aux_loss takes its load fractions and mean probabilities over the whole micro-batch, "
              "which no rank holds; fix: model.balance = bias (its load is summed over the ranks), or ", key, " = 1");
}

std::int64_t capacity_of(const MoeConfig& c, std::int64_t tokens) noexcept {
  if (c.capacity_factor <= 0) return tokens * c.top_k;
  return static_cast<std::int64_t>(
      std::ceil(c.capacity_factor * static_cast<double>(tokens * c.top_k) / static_cast<double>(c.experts)));
}

namespace {

// The kept assignments' rows in the expert-sorted buffers: offsets per expert, and each kept assignment's slot, stable
// in assignment order (r.slot stays −1 for the others).
void assign_slots(MoeRouting& r, const std::vector<char>& kept) {
  r.offsets.assign(static_cast<std::size_t>(r.experts + 1), 0);
  for (std::size_t a = 0; a < kept.size(); ++a)
    if (kept[a]) ++r.offsets[static_cast<std::size_t>(r.expert[a] + 1)];
  for (std::int64_t e = 0; e < r.experts; ++e)
    r.offsets[static_cast<std::size_t>(e + 1)] += r.offsets[static_cast<std::size_t>(e)];
  std::vector<std::int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  for (std::size_t a = 0; a < kept.size(); ++a)
    if (kept[a]) r.slot[a] = next[static_cast<std::size_t>(r.expert[a])]++;
}

}  // namespace

MoeRouting route_tokens(const MoeConfig& c, std::span<const double> logits, std::span<const double> bias,
                        std::int64_t tokens) {
  const std::int64_t E = c.experts, k = c.top_k;
  HZP_CHECK(static_cast<std::int64_t>(logits.size()) == tokens * E, "route_tokens: ", logits.size(),
            " logits for ", tokens, " tokens of ", E, " experts");
  HZP_CHECK(bias.empty() || static_cast<std::int64_t>(bias.size()) == E, "route_tokens: ", bias.size(),
            " biases for ", E, " experts");
  MoeRouting r;
  r.tokens = r.batch_tokens = tokens;
  r.experts = E;
  r.top_k = k;
  r.scores.resize(static_cast<std::size_t>(tokens * E));
  r.expert.resize(static_cast<std::size_t>(tokens * k));
  r.gate.resize(static_cast<std::size_t>(tokens * k));
  r.slot.assign(static_cast<std::size_t>(tokens * k), -1);
  r.load.assign(static_cast<std::size_t>(E), 0);
  std::vector<char> taken(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* z = logits.data() + t * E;
    double* s = r.scores.data() + t * E;
    if (c.router_score == RouterScore::sigmoid) {
      for (std::int64_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-z[e]));
    } else {
      const double m = *std::max_element(z, z + E);
      double sum = 0;
      for (std::int64_t e = 0; e < E; ++e) sum += (s[e] = std::exp(z[e] - m));
      for (std::int64_t e = 0; e < E; ++e) s[e] /= sum;
    }
    std::fill(taken.begin(), taken.end(), 0);
    double chosen_sum = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t best = -1;
      double best_v = 0;
      for (std::int64_t e = 0; e < E; ++e) {
        if (taken[static_cast<std::size_t>(e)]) continue;
        const double v = s[e] + (bias.empty() ? 0.0 : bias[static_cast<std::size_t>(e)]);
        if (best < 0 || v > best_v) best = e, best_v = v;  // strict: ties keep the lower index
      }
      taken[static_cast<std::size_t>(best)] = 1;
      r.expert[static_cast<std::size_t>(t * k + j)] = static_cast<std::int32_t>(best);
      chosen_sum += s[best];
      ++r.load[static_cast<std::size_t>(best)];
    }
    for (std::int64_t j = 0; j < k; ++j)
      r.gate[static_cast<std::size_t>(t * k + j)] = s[r.expert[static_cast<std::size_t>(t * k + j)]] / chosen_sum;
  }
  // Capacity: first come, first served in assignment order.
  const std::int64_t cap = capacity_of(c, tokens);
  std::vector<std::int64_t> kept(static_cast<std::size_t>(E), 0);
  std::vector<char> admitted(static_cast<std::size_t>(tokens * k), 0);
  for (std::int64_t a = 0; a < tokens * k; ++a) {
    std::int64_t& n = kept[static_cast<std::size_t>(r.expert[static_cast<std::size_t>(a)])];
    if (n < cap) {
      ++n;
      admitted[static_cast<std::size_t>(a)] = 1;
    } else {
      ++r.dropped;
    }
  }
  assign_slots(r, admitted);
  return r;
}

MoeRouting restrict_routing(const MoeRouting& r, std::int64_t begin, std::int64_t end) {
  const std::int64_t E = r.experts, k = r.top_k, n = end - begin;
  HZP_CHECK(begin >= 0 && begin <= end && end <= r.tokens, "restrict_routing: rows [", begin, ", ", end, ") of ",
            r.tokens, " tokens");
  MoeRouting out;
  out.tokens = n;
  out.experts = E;
  out.top_k = k;
  out.batch_tokens = r.batch_tokens;
  out.load = r.load;
  out.dropped = r.dropped;
  out.scores.assign(r.scores.begin() + begin * E, r.scores.begin() + end * E);
  out.expert.assign(r.expert.begin() + begin * k, r.expert.begin() + end * k);
  out.gate.assign(r.gate.begin() + begin * k, r.gate.begin() + end * k);
  out.slot.assign(static_cast<std::size_t>(n * k), -1);
  std::vector<char> kept(static_cast<std::size_t>(n * k));
  for (std::int64_t a = 0; a < n * k; ++a) kept[static_cast<std::size_t>(a)] = r.slot[static_cast<std::size_t>(begin * k + a)] >= 0;
  assign_slots(out, kept);
  return out;
}

void update_balance_bias(std::span<double> bias, std::span<const double> load, double rate) {
  HZP_CHECK(bias.size() == load.size() && !bias.empty(), "update_balance_bias: ", bias.size(), " biases, ",
            load.size(), " loads");
  double total = 0;
  for (double l : load) total += l;
  const double mean = total / static_cast<double>(load.size());
  for (std::size_t e = 0; e < bias.size(); ++e) {
    const double gap = mean - load[e];
    bias[e] += rate * static_cast<double>((gap > 0) - (gap < 0));
  }
}

double aux_loss_of(const MoeConfig& c, const MoeRouting& r) {
  const std::int64_t E = r.experts, N = r.tokens;
  double sum = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    double p = 0;
    for (std::int64_t t = 0; t < N; ++t) {
      const double* s = r.scores.data() + t * E;
      double norm = 1;
      if (c.router_score == RouterScore::sigmoid) {
        norm = 0;
        for (std::int64_t i = 0; i < E; ++i) norm += s[i];
      }
      p += s[e] / norm;
    }
    const double f = static_cast<double>(r.load[static_cast<std::size_t>(e)]) / static_cast<double>(N * r.top_k);
    sum += f * p / static_cast<double>(N);
  }
  return c.aux_loss_coef * static_cast<double>(E) * sum;
}

}  // namespace hzp::workloads
