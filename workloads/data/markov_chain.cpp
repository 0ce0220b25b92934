// The synthetic Markov chain: table generation from the seed (Floyd's subset sampling + Dirichlet
// weights, all counter-based), the stationary distribution by lazy power iteration on the sparse
// k-gram chain, and the exact entropies. The floor's derivation is written out before
// finite_context_floor() below and in docs/data.md.
#include "hzp/workloads/data/markov_chain.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "counter_rng.hpp"
#include "hzp/core/error.hpp"

namespace hzp::workloads {
namespace {

constexpr std::int64_t kMaxVocab = 2147483647;  // tokens are int32

// V^k without overflow (callers have already bounded it through the byte estimate).
std::int64_t ipow(std::int64_t v, int k) {
  std::int64_t r = 1;
  for (int i = 0; i < k; ++i) r *= v;
  return r;
}

double entropy_of(std::span<const double> p) {
  double h = 0;
  for (double x : p)
    if (x > 0) h -= x * std::log(x);
  return h;
}

// Inclusive prefix sums whose entries from the last positive probability on are exactly 1, so that
// upper_bound(u) for u ∈ [0, 1) always lands on an outcome of positive probability: rounding can
// leave the plain running sum at 1 − 1e-16, and a trailing zero-probability outcome would then be
// selectable.
void prefix_sums_ending_at_one(std::span<const double> p, std::span<double> cdf) {
  double run = 0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    run += p[i];
    cdf[i] = run;
    if (p[i] > 0) last = i;
  }
  for (std::size_t i = last; i < p.size(); ++i) cdf[i] = 1.0;
}

std::string human_bytes(double b) {
  std::ostringstream os;
  os.precision(3);
  if (b >= double(1ull << 30))
    os << b / double(1ull << 30) << " GiB";
  else
    os << b / double(1 << 20) << " MiB";
  return os.str();
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Parameters and size bound.

void MarkovChainParams::validate() const {
  std::ostringstream bad;
  const auto problem = [&bad]() -> std::ostringstream& {
    if (bad.tellp() > 0) bad << "; ";
    return bad;
  };
  if (order < 1 || order > 3)
    problem() << "data.synthetic.order=" << order << " is not supported (orders 1, 2 and 3 are)";
  if (vocab < 2 || vocab > kMaxVocab)
    problem() << "data.synthetic.vocab=" << vocab << " must lie in [2, " << kMaxVocab << "]";
  if (successors < 1 || successors > vocab)
    problem() << "data.synthetic.successors=" << successors
              << " must lie in [1, data.synthetic.vocab=" << vocab << "]";
  if (!std::isfinite(concentration) || concentration < 0)
    problem() << "data.synthetic.concentration=" << concentration
              << " must be finite and ≥ 0 (0 = equal probabilities over the successors)";
  if (bad.tellp() > 0) HZP_THROW(ConfigError, "invalid synthetic data source: ", bad.str());
}

double markov_table_bytes_estimate(int order, std::int64_t vocab, std::int64_t successors) {
  const double contexts = std::pow(double(vocab), order);
  double lower_marginals = 0;  // π_m for m < k
  for (int m = 1; m < order; ++m) lower_marginals += std::pow(double(vocab), m);
  // row_ptr (8) + π, power-iteration scratch and π's CDF (3 × 8) per context; successor (4),
  // probability (8) and CDF (8) per transition.
  return contexts * (8.0 + 24.0) + contexts * double(successors) * 20.0 + lower_marginals * 8.0;
}

// ------------------------------------------------------------------------------------------------
// Construction.

MarkovChain::MarkovChain(const MarkovChainParams& p, const MarkovBuildOptions& options) {
  p.validate();
  const double bytes = markov_table_bytes_estimate(p.order, p.vocab, p.successors);
  if (bytes > double(options.max_table_bytes))
    HZP_THROW(ConfigError, "synthetic chain with data.synthetic.vocab=", p.vocab,
              ", data.synthetic.order=", p.order, " (", std::pow(double(p.vocab), p.order),
              " contexts = vocab^order) and ", "data.synthetic.successors=", p.successors, " needs about ",
              bytes, " bytes (", human_bytes(bytes),
              ") for its table and stationary vectors, over the bound of ", options.max_table_bytes,
              " bytes (", human_bytes(double(options.max_table_bytes)),
              "): lower data.synthetic.order, data.synthetic.vocab or data.synthetic.successors");
  order_ = p.order;
  vocab_ = p.vocab;
  params_ = p;
  const std::int64_t contexts = ipow(p.vocab, p.order), s = p.successors;
  row_ptr_.resize(contexts + 1);
  for (std::int64_t c = 0; c <= contexts; ++c) row_ptr_[c] = c * s;
  succ_.resize(contexts * s);
  prob_.resize(contexts * s);

  const std::uint64_t succ_key = rng::fold(p.seed, rng::kTagSuccessors);
  const std::uint64_t weight_key = rng::fold(p.seed, rng::kTagWeights);
  std::vector<std::uint8_t> taken(p.vocab, 0);
  std::vector<double> log_w(s);
  for (std::int64_t c = 0; c < contexts; ++c) {
    // Floyd's algorithm: a uniform s-subset of [0, V) in exactly s draws, draw j keyed by (c, j),
    // so each row is a function of (seed, c) alone. `taken` is cleared again row by row (O(s)).
    std::int32_t* row_succ = succ_.data() + c * s;
    const std::uint64_t ckey = rng::fold(succ_key, std::uint64_t(c));
    std::int64_t n = 0;
    for (std::int64_t j = p.vocab - s; j < p.vocab; ++j) {
      std::int64_t t = std::int64_t(rng::below(rng::fold(ckey, std::uint64_t(j)), std::uint64_t(j + 1)));
      if (taken[t]) t = j;  // j itself cannot be taken yet: earlier draws were all < j
      taken[t] = 1;
      row_succ[n++] = std::int32_t(t);
    }
    std::sort(row_succ, row_succ + s);
    for (std::int64_t j = 0; j < s; ++j) taken[row_succ[j]] = 0;

    // Dirichlet(α) as normalised Gamma(α) variates; the weight of the j-th smallest successor is
    // keyed by (c, j). Log space: small α makes Gamma variates underflow.
    double* row_prob = prob_.data() + c * s;
    if (p.concentration == 0) {
      std::fill(row_prob, row_prob + s, 1.0 / double(s));
      continue;
    }
    const std::uint64_t wkey = rng::fold(weight_key, std::uint64_t(c));
    for (std::int64_t j = 0; j < s; ++j) {
      rng::Stream stream(rng::fold(wkey, std::uint64_t(j)));
      log_w[j] = rng::log_gamma_variate(stream, p.concentration);
    }
    const double top = *std::max_element(log_w.begin(), log_w.end());
    double sum = 0;
    for (std::int64_t j = 0; j < s; ++j) sum += row_prob[j] = std::exp(log_w[j] - top);
    for (std::int64_t j = 0; j < s; ++j) row_prob[j] /= sum;
  }
  finish(options);
}

MarkovChain MarkovChain::from_rows(int order, std::int64_t vocab, const ExplicitRows& rows,
                                   const MarkovBuildOptions& options) {
  if (order < 1 || order > 3 || vocab < 1 || vocab > kMaxVocab)
    HZP_THROW(DataError, "explicit Markov chain: order=", order, " must lie in [1, 3] and vocab=", vocab,
              " in [1, ", kMaxVocab, "]");
  const double contexts_d = std::pow(double(vocab), order);
  if (contexts_d > 1e9 || double(rows.size()) != contexts_d)
    HZP_THROW(DataError, "explicit Markov chain: ", rows.size(), " rows given, but order=", order,
              " and vocab=", vocab, " need vocab^order = ", contexts_d);
  MarkovChain m;
  m.order_ = order;
  m.vocab_ = vocab;
  const std::int64_t contexts = std::int64_t(contexts_d);
  m.row_ptr_.assign(contexts + 1, 0);
  for (std::int64_t c = 0; c < contexts; ++c) {
    auto row = rows[c];
    std::sort(row.begin(), row.end());
    double sum = 0;
    for (std::size_t j = 0; j < row.size(); ++j) {
      const auto [tok, pr] = row[j];
      if (tok < 0 || tok >= vocab || !(pr >= 0) || !std::isfinite(pr) || (j > 0 && row[j - 1].first == tok))
        HZP_THROW(DataError, "explicit Markov chain, row ", c, ": entry (token ", tok, ", probability ", pr,
                  ") is invalid: tokens must be distinct and in [0, vocab=", vocab,
                  "), probabilities finite and ≥ 0");
      sum += pr;
    }
    if (!(std::abs(sum - 1.0) <= 1e-9))
      HZP_THROW(DataError, "explicit Markov chain, row ", c, ": probabilities sum to ", sum,
                ", not 1 (tolerance 1e-9)");
    for (const auto& [tok, pr] : row) {
      m.succ_.push_back(tok);
      m.prob_.push_back(pr / sum);
    }
    m.row_ptr_[c + 1] = std::int64_t(m.succ_.size());
  }
  m.finish(options);
  return m;
}

// ------------------------------------------------------------------------------------------------
// Stationary distribution, marginals, entropies.

void MarkovChain::finish(const MarkovBuildOptions& options) {
  const std::int64_t contexts = num_contexts();
  cdf_.resize(prob_.size());
  for (std::int64_t c = 0; c < contexts; ++c) {
    const std::int64_t b = row_ptr_[c], e = row_ptr_[c + 1];
    prefix_sums_ending_at_one(std::span(prob_).subspan(b, e - b), std::span(cdf_).subspan(b, e - b));
  }

  // Lazy power iteration π ← (π + πP)/2 from the uniform start. The lazy chain has the same
  // stationary distributions as P but is aperiodic, so a periodic P (a deterministic cycle) still
  // converges; the limit is the Cesàro limit of the uniform start, a stationary distribution even
  // when P has several closed classes. The stopping test is the residual ‖πP − π‖₁ itself.
  // Context c = (a_1..a_k) moves to (a_2..a_k, x) = (c mod V^(k−1))·V + x.
  const std::int64_t stride = contexts / vocab_;  // V^(k−1)
  std::vector<double> pi(contexts, 1.0 / double(contexts)), next(contexts);
  bool converged = false;
  double residual = 0;
  std::int64_t it = 0;
  while (it < options.stationary_max_iterations) {
    std::fill(next.begin(), next.end(), 0.0);
    for (std::int64_t c = 0; c < contexts; ++c) {
      const double pc = pi[c];
      if (pc == 0) continue;
      const std::int64_t base = (c % stride) * vocab_;
      for (std::int64_t e = row_ptr_[c]; e < row_ptr_[c + 1]; ++e) next[base + succ_[e]] += pc * prob_[e];
    }
    ++it;
    residual = 0;
    for (std::int64_t c = 0; c < contexts; ++c) residual += std::abs(next[c] - pi[c]);
    if (residual <= options.stationary_tolerance) {
      converged = true;
      break;
    }
    double sum = 0;
    for (std::int64_t c = 0; c < contexts; ++c) sum += pi[c] = 0.5 * (pi[c] + next[c]);
    for (double& x : pi) x /= sum;  // keeps rounding from drifting the total mass
  }
  if (!converged)
    HZP_THROW(ConfigError, "synthetic chain (", describe(), "): the stationary distribution did not converge: "
              "after ", it, " power iterations ‖πP − π‖₁ = ", residual, " > tolerance ",
              options.stationary_tolerance, ". The chain mixes too slowly (e.g. a long deterministic cycle "
              "with data.synthetic.successors=1, or nearly disconnected contexts): raise "
              "data.synthetic.successors or data.synthetic.concentration, or change data.synthetic.seed");
  stationary_iterations_ = it;
  stationary_residual_ = residual;
  next = {};

  // π_m (m < k): sum the last token out of π_{m+1}; an m-gram index i expands to i·V + x.
  marginals_.assign(order_, {});
  marginals_[order_ - 1] = std::move(pi);
  for (int m = order_ - 1; m >= 1; --m) {
    const auto& up = marginals_[m];
    auto& down = marginals_[m - 1];
    down.assign(up.size() / vocab_, 0.0);
    for (std::size_t i = 0; i < down.size(); ++i)
      for (std::int64_t x = 0; x < vocab_; ++x) down[i] += up[i * vocab_ + x];
  }
  block_entropy_.resize(order_);
  for (int m = 1; m <= order_; ++m) block_entropy_[m - 1] = entropy_of(marginals_[m - 1]);

  const auto& st = marginals_.back();
  entropy_rate_ = 0;
  for (std::int64_t c = 0; c < contexts; ++c)
    if (st[c] > 0) entropy_rate_ += st[c] * entropy_of(row(c).probs);

  context_cdf_.resize(contexts);
  prefix_sums_ending_at_one(st, context_cdf_);
}

// Floor derivation. Let X_0, X_1, … be the chain started with (X_0..X_{k−1}) ~ π, so every window
// of m consecutive tokens has law π_m (stationarity), and H_m = H(π_m). A perfect model predicting
// target X_t from the prefix X_0..X_{t−1} has expected loss H(X_t | X_0..X_{t−1}), and
//   Σ_{t=1..T} H(X_t | X_<t) = H(X_0..X_T) − H(X_0) = H_{T+1} − H_1      (chain rule, telescoped).
// For t ≥ k the Markov property gives H(X_t | X_<t) = H(X_t | X_{t−k..t−1}) = Σ_c π(c)·H(P(·|c)) = h,
// so H_m = H_k + (m − k)·h for m ≥ k. For t < k the term is H_{t+1} − H_t, from π's marginals.
// Hence floor(T) = [ (H_{min(T+1,k)} − H_1) + max(0, T − k + 1)·h ] / T; for k = 1 the first part is
// 0 and the floor is h exactly (computed as h·(T/T) + 0 so that equality is bitwise).
double MarkovChain::finite_context_floor(std::int64_t seq_len) const {
  HZP_CHECK(seq_len >= 1, "seq_len=", seq_len, " must be ≥ 1");
  const std::int64_t tail = std::max<std::int64_t>(0, seq_len - order_ + 1);
  const double head = block_entropy(std::min<std::int64_t>(seq_len + 1, order_)) - block_entropy_[0];
  return entropy_rate_ * (double(tail) / double(seq_len)) + head / double(seq_len);
}

double MarkovChain::block_entropy(std::int64_t m) const {
  HZP_CHECK(m >= 1, "block length m=", m, " must be ≥ 1");
  if (m <= order_) return block_entropy_[m - 1];
  return block_entropy_[order_ - 1] + double(m - order_) * entropy_rate_;
}

// ------------------------------------------------------------------------------------------------
// Lookups and draws.

MarkovChain::Row MarkovChain::row(std::int64_t context) const {
  HZP_CHECK(context >= 0 && context < num_contexts(), "context=", context, " outside [0, ", num_contexts(),
            ")");
  const std::int64_t b = row_ptr_[context], n = row_ptr_[context + 1] - b;
  return {std::span(succ_).subspan(b, n), std::span(prob_).subspan(b, n)};
}

std::int64_t MarkovChain::context_index(std::span<const std::int32_t> last_k) const {
  HZP_CHECK(std::int64_t(last_k.size()) == order_, "a context holds order=", order_, " tokens, got ",
            last_k.size());
  std::int64_t c = 0;
  for (std::int32_t a : last_k) {
    HZP_CHECK(a >= 0 && a < vocab_, "token ", a, " outside [0, vocab=", vocab_, ")");
    c = c * vocab_ + a;
  }
  return c;
}

double MarkovChain::transition_prob(std::int64_t context, std::int32_t next) const {
  const Row r = row(context);
  const auto it = std::lower_bound(r.successors.begin(), r.successors.end(), next);
  if (it == r.successors.end() || *it != next) return 0.0;
  return r.probs[it - r.successors.begin()];
}

std::span<const double> MarkovChain::marginal(int m) const {
  HZP_CHECK(m >= 1 && m <= order_, "marginal m=", m, " outside [1, order=", order_, "]");
  return marginals_[m - 1];
}

double MarkovChain::conditional_prob(std::span<const std::int32_t> prefix, std::int32_t next) const {
  HZP_CHECK(next >= 0 && next < vocab_, "token ", next, " outside [0, vocab=", vocab_, ")");
  const std::int64_t t = std::int64_t(prefix.size());
  if (t >= order_) return transition_prob(context_index(prefix.last(order_)), next);
  std::int64_t idx = 0;
  for (std::int32_t a : prefix) {
    HZP_CHECK(a >= 0 && a < vocab_, "token ", a, " outside [0, vocab=", vocab_, ")");
    idx = idx * vocab_ + a;
  }
  const double den = t == 0 ? 1.0 : marginals_[t - 1][idx];
  HZP_CHECK(den > 0, "the prefix of length ", t, " has stationary probability 0");
  return marginals_[t][idx * vocab_ + next] / den;
}

std::int64_t MarkovChain::sample_context(double u) const {
  return std::upper_bound(context_cdf_.begin(), context_cdf_.end(), u) - context_cdf_.begin();
}

std::int32_t MarkovChain::sample_successor(std::int64_t context, double u) const {
  const auto b = cdf_.begin() + row_ptr_[context], e = cdf_.begin() + row_ptr_[context + 1];
  // Orders of s ≤ 16 are the common case: a linear scan beats the binary search's branches.
  if (e - b <= 16) {
    auto it = b;
    while (*it <= u) ++it;
    return succ_[it - cdf_.begin()];
  }
  return succ_[std::upper_bound(b, e, u) - cdf_.begin()];
}

std::int64_t MarkovChain::table_bytes() const {
  std::int64_t b = std::int64_t(row_ptr_.size()) * 8 + std::int64_t(succ_.size()) * 4 +
                   std::int64_t(prob_.size() + cdf_.size() + context_cdf_.size()) * 8;
  for (const auto& m : marginals_) b += std::int64_t(m.size()) * 8;
  return b;
}

std::string MarkovChain::describe() const {
  std::ostringstream os;
  os.precision(17);
  if (!params_) {
    os << "explicit rows, order=" << order_ << ", vocab=" << vocab_;
    return os.str();
  }
  os << "order=" << params_->order << ", vocab=" << params_->vocab << ", successors=" << params_->successors
     << ", concentration=" << params_->concentration << ", seed=" << params_->seed;
  return os.str();
}

}  // namespace hzp::workloads
