// The workload factory: model kinds by name (`model.kind`), each declaring its own `model.*` keys and
// presets and building, from a resolved configuration, a ModelSpec: the model's description (shape,
// parameter count, layout, FLOPs) without allocating anything, and the Workload itself on request. The
// harness only asks the factory, so a new model kind (the MoE decoder) is a new entry here and its keys,
// not a change to the harness.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hzp/core/options.hpp"
#include "hzp/workloads/activation_bytes.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/param_layout.hpp"
#include "hzp/workloads/precision.hpp"
#include "hzp/workloads/ring_attention.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::workloads {

/// A configured model, before anything is allocated. Immutable; cheap to copy around by pointer.
class ModelSpec {
 public:
  virtual ~ModelSpec() = default;
  /// The model.kind it was made for ("llama").
  virtual std::string kind() const = 0;
  /// One line for logs and results files: the kind and its shape.
  virtual std::string describe() const = 0;
  /// Every parameter once (N).
  virtual std::int64_t num_params() const = 0;
  virtual std::int64_t seq_len() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual FlopsPerToken flops_per_token() const = 0;
  /// The unit layout the built model will have (what plans and validation read).
  virtual ParamLayout layout() const = 0;
  /// The layout of rank `tp_rank` of a tensor-parallel group of `tp` (layout() at tp = 1): its pieces.
  /// ConfigError naming the sizes tp must divide.
  virtual ParamLayout tensor_parallel_layout(int tp, int tp_rank) const = 0;
  /// The layout of rank `ep_rank` of an expert-parallel group of `ep` (tensor_parallel_layout(tp, tp_rank) at ep =
  /// 1): its experts' pieces, beside its tensor-parallel pieces. ConfigError naming the key when the model cannot
  /// be split so (no experts, ep not dividing them).
  virtual ParamLayout expert_parallel_layout(int ep, int ep_rank, int tp = 1, int tp_rank = 0) const = 0;
  /// Elements (f64) of the model's per-step statistics (Workload::take_step_statistics: the MoE load, dropped
  /// assignments and auxiliary losses per MoE block), which the step driver all-reduces once per step; 0 for none.
  virtual std::int64_t step_statistics() const { return 0; }
  /// Of unit `unit`'s parameters in layout(), the elements one token's matmuls read (`total`: every weight once, an
  /// MoE block's routed experts top_k / experts of theirs) and the routed experts' part of it (`routed`). What the
  /// simulator splits a unit's calibrated time by (FLOP shares); the default: a dense unit, every element read.
  struct ActiveReads {
    double total = 0, routed = 0;
  };
  virtual ActiveReads active_reads(int unit) const {
    return {static_cast<double>(layout().unit_numel(unit)), 0.0};
  }
  /// The expert-parallel collectives one micro-batch issues in unit `unit`'s forward or backward (for the plan; the
  /// all-to-all-v at the balanced expectation).
  virtual std::vector<ExpertParallelCall> expert_parallel_calls(int unit, bool backward,
                                                                const ExpertParallelRun& run) const = 0;
  /// The tensor-parallel collectives one micro-batch issues in unit `unit`'s forward or backward (for the plan).
  virtual std::vector<TensorParallelCall> tensor_parallel_calls(int unit, bool backward,
                                                                const TensorParallelRun& run) const = 0;
  /// The ring-attention messages one micro-batch sends on the context-parallel group in unit `unit`'s forward or
  /// backward (recompute's repeated forward included), for the plan: none at cp = 1 and outside the blocks.
  virtual RingAttentionMessages context_parallel_messages(int unit, bool backward,
                                                          const TensorParallelRun& run) const = 0;
  /// Elements of the activation between two units for one micro-batch of `micro_batch_size` sequences: what a
  /// pipeline stage sends its neighbour (1/tp of the tokens under sequence parallelism, 1/cp under context
  /// parallelism).
  virtual std::int64_t boundary_elements(std::int64_t micro_batch_size, int tp, bool sequence_parallel,
                                         int cp = 1) const = 0;
  /// The activation bytes one micro-batch costs in unit `unit` on a rank of `run` (activation_bytes.hpp): what
  /// the plan's activation estimate is made of.
  virtual UnitActivationBytes activation_bytes(int unit, const TensorParallelRun& run) const = 0;
  /// The widest linear layer's weight, [out, in] (the shape a compute-peak probe imitates).
  struct Linear {
    std::int64_t out = 0, in = 0;
  };
  virtual Linear widest_linear() const = 0;
  /// The model, for `precision`, split over `tp`'s group when it has one, holding only the units of a
  /// pipeline stage when `stage` cuts it (see stage_layout), and running its share of every sequence over
  /// `cp`'s group when it has one, and holding its share of the routed experts over `ep`'s group when it has one.
  virtual std::unique_ptr<Workload> build(Precision precision, const TensorParallel& tp = {},
                                          const StageCut& stage = {}, const ContextParallel& cp = {},
                                          const ExpertParallel& ep = {}) const = 0;
};

/// Registered model kinds, in registration order ("llama" first).
std::vector<std::string> model_kinds();
/// Adds `model.kind`, `model.preset` and every kind's `model.*` keys.
void register_model_options(OptionTable& table);
/// Adds one `model.preset` preset per model_presets() entry. A preset also sets train.* and data.synthetic.*
/// keys, so the caller registers those first.
void register_model_presets(OptionTable& table);
/// The spec of the configured kind; ConfigError naming every key and value a problem involves.
std::unique_ptr<ModelSpec> model_spec_from(const ResolvedConfig& config);

/// The Llama decoder's `model.*` keys read back (validated): what model_spec_from builds for "llama".
LlamaConfig llama_config_from(const ResolvedConfig& config);
/// The spec of a Llama decoder of `config` (validated): what model_spec_from makes for model.kind = llama.
std::unique_ptr<ModelSpec> llama_spec(const LlamaConfig& config);

}  // namespace hzp::workloads
