// The Mixture-of-Experts feed-forward layer of the decoder (docs/workloads.md, "Mixture of Experts"): its
// configuration (the `model.experts`... keys, held in LlamaConfig::moe), the router (top-k over sigmoid or
// softmax scores, normalised over the chosen k), capacity dropping, the balancing rules (DeepSeek-V3's
// auxiliary-loss-free bias, or the switch-style auxiliary loss), and the routed experts' forward and backward
// on the host. The decoder (workloads/llama/) calls these for its MoE layers; tests call them directly against
// plain loops. An MoE layer is an extension of the Llama block, not a model kind of its own: see llama.hpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/enum_names.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::coll {
class Communicator;
}

namespace hzp::workloads {

enum class RouterScore { sigmoid, softmax };
enum class MoeBalance { bias, aux_loss };
/// The model.router_score and model.balance names.
inline constexpr EnumName<RouterScore> kRouterScoreNames[] = {{"sigmoid", RouterScore::sigmoid},
                                                              {"softmax", RouterScore::softmax}};
inline constexpr EnumName<MoeBalance> kMoeBalanceNames[] = {{"bias", MoeBalance::bias},
                                                            {"aux_loss", MoeBalance::aux_loss}};
std::string_view to_string(RouterScore s) noexcept;
std::string_view to_string(MoeBalance b) noexcept;
/// ConfigError naming `key` and the choices.
RouterScore router_score_from(std::string_view name, std::string_view key);
MoeBalance moe_balance_from(std::string_view name, std::string_view key);

/// The MoE keys. experts = 0: a dense model (every other key is then ignored).
struct MoeConfig {
  std::int64_t experts = 0;         ///< model.experts: routed experts per MoE layer
  std::int64_t top_k = 2;           ///< model.top_k: routed experts per token
  std::int64_t expert_ffn = 0;      ///< model.expert_ffn: SwiGLU width of one expert (routed and shared)
  std::int64_t shared_experts = 0;  ///< model.shared_experts: always-on experts, run as one SwiGLU of S·expert_ffn
  std::int64_t dense_layers = 0;    ///< model.dense_layers: the first layers keep the dense MLP
  RouterScore router_score = RouterScore::sigmoid;
  MoeBalance balance = MoeBalance::bias;
  /// model.bias_update_rate: γ of the bias rule, b_e += γ·sign(mean load − load_e) once per step.
  double bias_update_rate = 1e-3;
  /// model.aux_loss_coef: α of the auxiliary loss α·E·Σ_e f_e·P_e (balance = aux_loss).
  double aux_loss_coef = 1e-2;
  /// model.capacity_factor: 0 = dropless; else each expert takes at most ceil(cf·tokens·top_k/experts)
  /// assignments of a micro-batch (capacity_of) and drops the rest in assignment order.
  double capacity_factor = 0;

  bool enabled() const noexcept { return experts > 0; }
  /// Whether transformer block `layer` (0-based) has the MoE FFN.
  bool is_moe_layer(std::int64_t layer) const noexcept { return enabled() && layer >= dense_layers; }
  /// Problems with the keys, each naming the key, the value and the fix (LlamaConfig::validate collects them).
  void collect_problems(std::int64_t layers, std::vector<std::string>& problems) const;
};

/// ConfigError naming the keys, the values and the fix unless an MoE layer (c.enabled()) can route a rank's share of
/// a micro-batch's tokens on its own when `key` (e.g. "scheduler.cp") = `degree` > 1 splits them over ranks: capacity
/// (model.capacity_factor > 0) and the auxiliary loss (model.balance = aux_loss) are statistics of the whole
/// micro-batch, which a rank holding 1/degree of its tokens does not see. Dropless bias balancing routes every
/// token on its own (its load is summed over the ranks at the step's end), so it is allowed. Nothing for a dense
/// model or degree 1.
void check_moe_token_split(const MoeConfig& c, std::string_view key, int degree);

/// Assignments an expert takes from a micro-batch of `tokens` tokens: ceil(cf·tokens·top_k/experts), or every
/// one (tokens·top_k) when dropless (cf = 0).
std::int64_t capacity_of(const MoeConfig& c, std::int64_t tokens) noexcept;

/// One micro-batch's routing of one layer. Assignment a = t·top_k + j is token t's j-th choice (j = 0 the
/// highest biased score; ties go to the lower expert index).
struct MoeRouting {
  std::int64_t tokens = 0, experts = 0, top_k = 0;
  std::vector<double> scores;         ///< [tokens, experts]: sigmoid(logit) or softmax over the experts
  std::vector<std::int32_t> expert;   ///< [tokens·top_k] the chosen expert
  std::vector<double> gate;           ///< [tokens·top_k] score / Σ of the token's chosen scores
  std::vector<std::int64_t> slot;     ///< [tokens·top_k] row in the expert-sorted buffers; −1 = dropped
  std::vector<std::int64_t> offsets;  ///< [experts + 1] the first sorted row of each expert
  std::vector<std::int64_t> load;     ///< [experts] assignments chosen (before capacity), what balancing reads
  std::int64_t dropped = 0;           ///< assignments beyond capacity
  /// The micro-batch's tokens that load, dropped and the auxiliary loss are over: `tokens`, or more when this is a
  /// rank's share of the rows (restrict_routing).
  std::int64_t batch_tokens = 0;
  std::int64_t kept() const noexcept { return offsets.empty() ? 0 : offsets.back(); }
};

/// A rank's share of a micro-batch's token rows, [begin, end): under tensor parallelism each rank of the group runs
/// the routed experts on its own rows (moe_block.cpp). end < 0: every row.
struct MoeTokenRows {
  std::int64_t begin = 0, end = -1;
  bool all() const noexcept { return end < 0; }
};

/// The routing of tokens [begin, end) of `r` (a routing of the whole micro-batch), as a routing of end − begin
/// tokens: their scores, choices and gates; a kept assignment stays kept and a dropped one dropped (capacity was the
/// whole micro-batch's), the kept ones re-slotted by expert, stable in assignment order. load, dropped and
/// batch_tokens stay the whole micro-batch's (what balancing and the auxiliary loss read).
MoeRouting restrict_routing(const MoeRouting& r, std::int64_t begin, std::int64_t end);

/// Routes `tokens` rows of router logits [tokens, experts]: scores, top_k of score + bias (bias: one per expert,
/// empty for none; it changes only which experts are chosen, never the gates), gates normalised over the chosen
/// k, then capacity: assignments are admitted in assignment order (token by token, each token's choices in
/// rank order) while their expert has room; the rest are dropped (slot −1) and counted. Kept assignments are
/// sorted by expert, stable in assignment order.
MoeRouting route_tokens(const MoeConfig& c, std::span<const double> logits, std::span<const double> bias,
                        std::int64_t tokens);

/// The auxiliary-loss-free bias rule (DeepSeek-V3, arXiv 2412.19437 §2.1.2): with load_e the assignments expert e
/// was chosen for over the step's whole global batch and mean = Σ load / E, b_e += γ·sign(mean − load_e) (an
/// underloaded expert gains, an overloaded one loses, an exactly average one keeps its bias).
void update_balance_bias(std::span<double> bias, std::span<const double> load, double rate);

/// The switch-style auxiliary loss of one micro-batch (Fedus et al., arXiv 2101.03961 eq. 4, with top-k):
/// α·E·Σ_e f_e·P_e, f_e = load_e / (tokens·top_k) (treated as a constant), P_e = the mean over tokens of the
/// token's probability for e (the softmax scores, or sigmoid scores divided by their sum over experts).
double aux_loss_of(const MoeConfig& c, const MoeRouting& r);

/// The routed experts' weights of one layer: router [E, d], w_gate and w_up [E, F, d], w_down [E, d, F].
struct MoeExpertWeights {
  ConstTensorView router, w_gate, w_up, w_down;
};
struct MoeExpertGrads {
  TensorView router, w_gate, w_up, w_down;
  bool accumulate = false;
};

/// What the routed half of one MoE layer keeps between its forward and its backward, for one micro-batch.
/// The expert buffers are sized for every assignment (tokens·top_k rows, kept or not), so the activation
/// bytes of a layer do not depend on the routing (moe_saved_bytes).
struct MoeSaved {
  MoeRouting routing;
  Allocation g, u, a;  // [tokens·top_k, F] expert-sorted gate and up projections, SwiGLU output
  Allocation o;        // [tokens·top_k, d] expert outputs before their gates
  // Expert parallelism (moe_expert_parallel.cpp): g, u and a then hold the rows this rank's experts received from
  // the group ([received, F], expert-major), x those rows' inputs, and `exchange` how many rows went where.
  Allocation x;
  struct Exchange {
    std::vector<std::int64_t> sent;      ///< [ep · local experts] rows this rank sent to each rank's each expert
    std::vector<std::int64_t> received;  ///< [ep · local experts] rows each source sent to each of this rank's experts
  } exchange;
  double aux = 0;         // this micro-batch's auxiliary loss, unweighted (aux_loss_of)
  double aux_weight = 0;  // its weight in the objective (moe_experts_forward's aux_weight)
  void reset() noexcept;
  bool held() const noexcept { return static_cast<bool>(o); }
};

/// Bytes MoeSaved holds for `tokens` tokens in activation dtype `act` (tag activation).
std::int64_t moe_saved_bytes(const MoeConfig& c, std::int64_t tokens, std::int64_t hidden, DType act) noexcept;

/// Forward of the routed experts on the host: routes h [tokens, d] (the block's normed input), runs every expert
/// on its rows and, when y is given, adds Σ_j gate_j·expert_j(h_t) to y [tokens, d] (in the activation dtype,
/// rounded once per element). bias as in route_tokens. `aux_weight` scales the auxiliary loss this micro-batch
/// adds to the objective (its tokens / the global normaliser; 0 under bias balancing). Fills `saved`.
/// Expert parallelism (`ep`, a group of P > 1 ranks): w.w_gate, w.w_up and w.w_down are this rank's E/P
/// consecutive experts (rank r holds experts r·E/P ..), the router is whole. Routing and capacity run on this
/// rank's tokens exactly as on one rank; the kept rows travel to their experts' ranks and the outputs back by
/// all-to-all-v (the counts first, by an all-to-all), so every rank of the group must call this for the same
/// layer in the same order.
/// `rows` (tensor parallelism): every token of h is routed, identically on every rank of the tp group (capacity and
/// the auxiliary loss stay the whole micro-batch's), and the experts run on rows [rows.begin, rows.end) only
/// (restrict_routing: `saved` holds that share); y is then [end − begin, d], those rows' output.
void moe_experts_forward(const MoeConfig& c, ConstTensorView h, const MoeExpertWeights& w,
                         std::span<const double> bias, double aux_weight, TensorView y, MoeSaved& saved,
                         CachingAllocator& alloc, StreamRef s, coll::Communicator* ep = nullptr,
                         MoeTokenRows rows = {});
/// Backward: from dy [tokens, d] (the gradient of the layer's output) adds the routed half's input gradient to
/// dh [tokens, d] and writes (or accumulates) every expert's and the router's weight gradient, an expert that got
/// no rows included (zero, or left as it was). Includes the auxiliary loss's gradient (weighted as in forward).
/// Frees `saved`. With `ep` (the forward's group) g's expert tensors are this rank's experts' and receive the
/// gradient of every row the group sent them; the output gradients go to the experts' ranks and the input
/// gradients come back by all-to-all-v, the forward's exchanges mirrored. After a forward on a share of the rows
/// (`rows`), dy, h and dh are those rows only, and the router's and experts' gradients are those rows' share.
void moe_experts_backward(const MoeConfig& c, ConstTensorView dy, ConstTensorView h, const MoeExpertWeights& w,
                          const MoeExpertGrads& g, TensorView dh, MoeSaved& saved,
                          CachingAllocator& alloc, StreamRef s, coll::Communicator* ep = nullptr);

/// The expert-parallel exchanges inside moe_experts_forward / _backward (moe_expert_parallel.cpp). Forward: from
/// the routing in `saved` and h, sends the kept rows to their experts' ranks, runs this rank's experts on what
/// arrived (saved.x, g, u, a) and brings their outputs back into saved.o's slots. Backward: sends dout (the
/// outputs' gradients, [kept, d] in slot order) to the experts' ranks, writes or accumulates the experts' weight
/// gradients there, and brings the inputs' gradients back into dx's slots.
void moe_expert_parallel_forward(const MoeConfig& c, ConstTensorView h, const MoeExpertWeights& w, MoeSaved& saved,
                                 CachingAllocator& alloc, StreamRef s, coll::Communicator& ep);
void moe_expert_parallel_backward(const MoeConfig& c, const MoeExpertWeights& w, const MoeExpertGrads& g,
                                  ConstTensorView dout, TensorView dx, MoeSaved& saved, CachingAllocator& alloc,
                                  StreamRef s, coll::Communicator& ep);

}  // namespace hzp::workloads
