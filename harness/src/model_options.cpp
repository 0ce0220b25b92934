// The `train.*` and `data.*` keys around the workload factory's `model.*` keys and presets, and the typed
// configs read back from a resolved configuration (model_options.hpp). Key defaults are tiny's values, as
// the model keys' are (workloads/model/model_factory.cpp).
#include "hzp/harness/model_options.hpp"

#include <string>
#include <utility>
#include <vector>

#include "hzp/core/enum_option.hpp"
#include "hzp/workloads/data/data_config.hpp"
#include "hzp/workloads/model_factory.hpp"
#include "hzp/workloads/presets.hpp"

namespace hzp::harness {
namespace {

using S = OptionSpec;
using workloads::ModelPreset;

}  // namespace

void register_model_keys(OptionTable& t) {
  const ModelPreset& tiny = workloads::model_preset("tiny");
  const auto& tr = tiny.train;

  workloads::register_model_options(t);

  // ---- train: batches, optimizer, schedule, numerics (schedulers/) --------------------------------
  t.add(S::integer("train.global_batch", tr.global_batch, "Sequences per optimizer step, all ranks together")
            .positive()
            .with_unit("sequences"));
  t.add(S::integer("train.micro_batch_size", tr.micro_batch_size,
                   "Sequences per forward/backward; micro-batch j goes to data-parallel rank j mod dp")
            .positive()
            .with_unit("sequences"));
  t.add(S::integer("train.steps", tr.steps, "Optimizer steps; the cosine schedule ends here").positive());
  t.add(S::integer("train.warmup_steps", tr.warmup_steps, "Linear warm-up steps before the cosine; a preset's or default warm-up longer than train.steps is "
                   "scaled to the preset's share of the run").non_negative());
  t.add(S::real("train.lr", tr.lr, "Peak learning rate").non_negative());
  t.add(S::real("train.lr_min", tr.lr_min, "Learning rate the cosine reaches at train.steps").non_negative());
  t.add(S::real("train.clip", tr.clip, "Global gradient-norm clipping threshold; 0 = off").non_negative());
  t.add(S::real("train.weight_decay", tr.weight_decay, "AdamW decoupled weight decay (every parameter)")
            .non_negative());
  t.add(S::real("train.beta1", tr.beta1, "AdamW beta1").at_least(0).below(1));
  t.add(S::real("train.beta2", tr.beta2, "AdamW beta2").at_least(0).below(1));
  t.add(S::real("train.eps", tr.eps, "AdamW epsilon (added to sqrt of the corrected v)").positive());
  t.add(S::boolean("train.recompute", tr.recompute,
                   "Full activation recompute: forward keeps each unit's input only, backward re-runs it"));
  t.add(S::boolean("train.deterministic", tr.deterministic,
                   "Bitwise-reproducible training (docs/deterministic.md): int64 fixed-point gradient sums (8 bytes "
                   "per gradient element), exact norm, loss in micro-batch order, OpenBLAS on one thread; every "
                   "data-parallel scheduler at any world size then matches scheduler none bit for bit"));
  t.add(enum_option_spec("train.precision", workloads::kPrecisionNames, tr.precision,
                       "fp32; bf16-mixed (bf16 parameters and activations, fp32 gradients, master weights and "
                       "Adam moments); fp64 for tests only"));
  t.add(S::integer("train.seed", static_cast<std::int64_t>(tr.seed),
                   "Seed of the parameter initialisation (a function of seed and flat index only)")
            .non_negative());

  // ---- data: the source of sequences (workloads/data) --------------------------------------------
  t.add(enum_option_spec("data.source", workloads::kDataKindNames, workloads::DataConfig{}.kind,
                       "synthetic Markov chain, or a token file: llm.c shards, nanoGPT raw uint16, raw bytes"));
  t.add(S::string("data.path", "", "Token file for the file sources; empty for synthetic"));
  t.add(S::integer("data.synthetic.order", tiny.chain.order, "Markov order k: a context is the last k tokens")
            .in_range(1, 3));
  t.add(S::integer("data.synthetic.vocab", 0, "Chain vocabulary; 0 = model.vocab").non_negative());
  t.add(S::integer("data.synthetic.successors", tiny.chain.successors, "Tokens with nonzero probability after each context")
            .positive());
  t.add(S::real("data.synthetic.concentration", tiny.chain.concentration,
                "Dirichlet concentration of each context's successor weights; 0 = equal probabilities")
            .non_negative());
  t.add(S::integer("data.synthetic.seed", static_cast<std::int64_t>(tiny.chain.seed),
                   "Seed of the chain's table and of its samples")
            .non_negative());
  t.add(enum_option_spec("data.packing", workloads::kPackingKindNames, workloads::DocumentPacking{}.kind,
                       "none: a sequence is one document; documents: log-normal documents packed into each "
                       "sequence, attention inside a document only (docs/data.md, Document packing)"));
  t.add(S::real("data.documents.mean_tokens", workloads::DocumentPacking{}.mean_tokens,
                "Mean document length in tokens (data.packing = documents)")
            .positive());
  t.add(S::real("data.documents.sigma", workloads::DocumentPacking{}.sigma,
                "Standard deviation of a document's log length; 0 = every document mean_tokens long")
            .non_negative());
  t.add(S::integer("data.documents.seed", 0, "Seed of the document lengths (independent of the tokens')")
            .non_negative());

  workloads::register_model_presets(t);
}

workloads::TrainConfig train_config_from(const ResolvedConfig& c) {
  workloads::TrainConfig t;
  t.global_batch = c.get_int("train.global_batch");
  t.micro_batch_size = c.get_int("train.micro_batch_size");
  t.steps = c.get_int("train.steps");
  t.warmup_steps = c.get_int("train.warmup_steps");
  t.lr = c.get_double("train.lr");
  t.lr_min = c.get_double("train.lr_min");
  t.clip = c.get_double("train.clip");
  t.weight_decay = c.get_double("train.weight_decay");
  t.beta1 = c.get_double("train.beta1");
  t.beta2 = c.get_double("train.beta2");
  t.eps = c.get_double("train.eps");
  t.recompute = c.get_bool("train.recompute");
  t.deterministic = c.get_bool("train.deterministic");
  t.precision = workloads::parse_precision(c.get_string("train.precision"));
  t.seed = static_cast<std::uint64_t>(c.get_int("train.seed"));
  t.validate();
  return t;
}

workloads::DataConfig data_config_from(const ResolvedConfig& c) {
  workloads::DataConfig d;
  d.kind = workloads::parse_data_kind(c.get_string("data.source"));
  d.path = c.get_string("data.path");
  d.vocab = c.get_int("model.vocab");
  d.seq_len = c.get_int("model.seq_len");
  d.synthetic.order = static_cast<int>(c.get_int("data.synthetic.order"));
  d.synthetic.vocab = c.get_int("data.synthetic.vocab");
  d.synthetic.successors = c.get_int("data.synthetic.successors");
  d.synthetic.concentration = c.get_double("data.synthetic.concentration");
  d.synthetic.seed = static_cast<std::uint64_t>(c.get_int("data.synthetic.seed"));
  d.packing.kind = workloads::parse_packing_kind(c.get_string("data.packing"));
  d.packing.mean_tokens = c.get_double("data.documents.mean_tokens");
  d.packing.sigma = c.get_double("data.documents.sigma");
  d.packing.seed = static_cast<std::uint64_t>(c.get_int("data.documents.seed"));
  d.validate();
  return d;
}

}  // namespace hzp::harness
