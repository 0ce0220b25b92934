// The Llama decoder's expert-parallel split (llama.hpp): the checks a layout must pass, the layout of one rank
// (its experts' pieces of every MoE block), and the all-to-alls its MoE layers issue per micro-batch for the plan,
// written beside the split so that the plan needs no second description of moe_expert_parallel.cpp's exchanges.
// N = micro_batch_size · seq_len / (cp · tp) tokens (the rank's share: moe_block.cpp), d = hidden, k = top_k,
// E = experts, per MoE block and micro-batch:
//   forward   all_to_all of the row counts (E int64: E/ep to each rank), all_to_allv of the kept rows (dispatch)
//             and of the experts' outputs (combine), each N·k·d elements at the balanced expectation;
//   backward  all_to_allv of the outputs' gradients (the dispatch's counts) and of the inputs' gradients (the
//             combine's), N·k·d each; under recompute the forward's three again.
#include <string>

#include "hzp/core/error.hpp"
#include "hzp/workloads/llama.hpp"

namespace hzp::workloads {

void check_expert_parallel(const LlamaConfig& c, int ep, int tp) {
  if (ep < 1) HZP_THROW(ConfigError, "scheduler.ep = ", ep, " must be >= 1; fix: 1 (no expert parallelism) or a divisor of model.experts");
  if (ep == 1) return;
  if (!c.moe.enabled())
    HZP_THROW(ConfigError, "scheduler.ep = ", ep, " splits the routed experts over ", ep, " ranks, but model.experts = ",
              c.moe.experts, " (a dense model has none); fix: scheduler.ep = 1, or an MoE model (model.experts > 0, "
              "e.g. model.preset = \"tiny-moe\")");
  if (c.moe.experts % ep != 0)
    HZP_THROW(ConfigError, "scheduler.ep = ", ep, " does not divide model.experts = ", c.moe.experts,
              " (each rank of the ep group holds experts / ep consecutive experts of every MoE block); fix: an ep that "
              "divides ", c.moe.experts, ", e.g. scheduler.ep = ", (c.moe.experts % 2 == 0 ? 2 : 1));
  (void)tp;  // tensor parallelism composes: the experts stay whole under tp (llama_expert_parallel_layout)
}

ParamLayout llama_expert_parallel_layout(const LlamaConfig& c, int ep, int ep_rank, int tp, int tp_rank) {
  HZP_CHECK(ep_rank >= 0 && ep_rank < ep, "llama_expert_parallel_layout: expert-parallel rank ", ep_rank, " of ", ep);
  // The tensor-parallel pieces first (attention, the shared experts, the ends); the routed experts are whole there.
  const ParamLayout base = llama_layout(c, tp, tp_rank);
  if (ep == 1) return base;
  check_expert_parallel(c, ep, tp);
  std::vector<Unit> units;
  for (int u = 0; u < base.num_units(); ++u) {
    Unit unit = base.unit(u);
    unit.numel = 0;
    for (std::size_t t = 0; t < unit.tensors.size(); ++t) {
      ParamTensor& w = unit.tensors[t];
      const std::string_view n = base.unit(u).tensors[t].name;
      // Where the whole tensor sits in the unsharded layout (a tensor-parallel layout has set it on every tensor).
      const std::int64_t global = w.global_offset >= 0 ? w.global_offset : base.tensor_offset(u, static_cast<int>(t));
      // The routed experts' weights, [E, ·, ·]: this rank's E/ep consecutive experts.
      if (n.ends_with("moe.w_gate") || n.ends_with("moe.w_up") || n.ends_with("moe.w_down")) {
        w.global_shape = w.shape;
        w.shape.dims[0] /= ep;
        w.shard = {0, ep_rank, ep, "ep"};
      }
      // A whole tensor after the first piece sits elsewhere in this layout than in the unsharded one.
      w.global_offset = global;
      w.offset = unit.numel;
      unit.numel += w.numel();
    }
    units.push_back(std::move(unit));
  }
  return ParamLayout(std::move(units));
}

std::vector<ExpertParallelCall> llama_expert_parallel_calls(const LlamaConfig& c, int unit, bool backward,
                                                            const ExpertParallelRun& run) {
  std::vector<ExpertParallelCall> out;
  const int head = static_cast<int>(c.layers) + 1;
  HZP_CHECK(unit >= 0 && unit <= head, "llama_expert_parallel_calls: unit ", unit, " of ", head + 1);
  if (run.ep <= 1 || unit == 0 || unit == head || !c.moe.is_moe_layer(unit - 1)) return out;
  // Every assignment of the rank's tokens kept, balanced: its context-parallel share of each sequence, and of those
  // its tensor-parallel share of the rows.
  const std::int64_t rows = run.micro_batch_size * c.seq_len / run.cp / run.tp * c.moe.top_k;
  const DType act = activation_dtype(run.precision);
  auto forward = [&] {
    out.push_back({coll::CollOp::all_to_all, c.moe.experts, DType::i64, 1, false, "row counts per rank and expert"});
    out.push_back({coll::CollOp::all_to_allv, rows * c.hidden, act, 2, true,
                   "dispatch and combine: token rows to their experts' ranks and back"});
  };
  if (!backward) {
    forward();
    return out;
  }
  if (run.recompute) forward();
  out.push_back({coll::CollOp::all_to_allv, rows * c.hidden, act, 2, true,
                 "output gradients to the experts' ranks, input gradients back"});
  return out;
}

}  // namespace hzp::workloads
