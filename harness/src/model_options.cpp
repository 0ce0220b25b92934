// The `model.*`, `train.*` and `data.*` keys, the model presets, and the typed configs read back from a
// resolved configuration (model_options.hpp). Key defaults are tiny's values and every preset's values
// are taken from workloads::model_presets(), so shapes and training defaults live in one place.
#include "hzp/harness/model_options.hpp"

#include <string>
#include <utility>
#include <vector>

#include "hzp/workloads/presets.hpp"

namespace hzp::harness {
namespace {

using S = OptionSpec;
using workloads::ModelPreset;

std::vector<std::pair<std::string, OptionValue>> preset_values(const ModelPreset& p) {
  const auto& m = p.model;
  const auto& t = p.train;
  using I = std::int64_t;
  return {
      {"model.layers", I{m.layers}},
      {"model.hidden", I{m.hidden}},
      {"model.heads", I{m.heads}},
      {"model.kv_heads", I{m.kv_heads}},
      {"model.head_dim", I{m.head_dim}},
      {"model.ffn_hidden", I{m.ffn_hidden}},
      {"model.vocab", I{m.vocab}},
      {"model.seq_len", I{m.seq_len}},
      {"model.max_seq_len", I{m.max_seq_len}},
      {"model.rope_base", m.rope_base},
      {"model.norm_eps", m.norm_eps},
      {"model.tied_embeddings", m.tied_embeddings},
      {"train.global_batch", I{t.global_batch}},
      {"train.micro_batch_size", I{t.micro_batch_size}},
      {"train.steps", I{t.steps}},
      {"train.warmup_steps", I{t.warmup_steps}},
      {"train.lr", t.lr},
      {"train.lr_min", t.lr_min},
      {"train.clip", t.clip},
      {"train.weight_decay", t.weight_decay},
      {"train.beta1", t.beta1},
      {"train.beta2", t.beta2},
      {"train.precision", std::string(workloads::to_string(t.precision))},
      {"data.synthetic.order", I{p.chain.order}},
      {"data.synthetic.successors", I{p.chain.successors}},
      {"data.synthetic.concentration", p.chain.concentration},
  };
}

}  // namespace

void register_model_keys(OptionTable& t) {
  const ModelPreset& tiny = workloads::model_preset("tiny");
  const auto& m = tiny.model;
  const auto& tr = tiny.train;

  // ---- model: the Llama decoder's shape (workloads/llama) ----------------------------------------
  t.add(S::enumeration("model.preset", {"tiny"}, "tiny",
                       "Model shape with its training and data defaults (tiny, small, 1b, 9b, seed-oss-36b; "
                       "docs/workloads.md); any model.*, train.* or data.* key set explicitly overrides it"));
  t.add(S::integer("model.layers", m.layers, "Transformer blocks").positive());
  t.add(S::integer("model.hidden", m.hidden, "Model width d (residual stream)").positive());
  t.add(S::integer("model.heads", m.heads, "Query heads").positive());
  t.add(S::integer("model.kv_heads", m.kv_heads, "Key/value heads (grouped-query attention); must divide model.heads")
            .positive());
  t.add(S::integer("model.head_dim", m.head_dim, "Dimension of one head; 0 = model.hidden / model.heads").non_negative());
  t.add(S::integer("model.ffn_hidden", m.ffn_hidden, "SwiGLU inner width").positive());
  t.add(S::integer("model.vocab", m.vocab, "Vocabulary size (the synthetic chain's too)").at_least(2));
  t.add(S::integer("model.seq_len", m.seq_len, "Tokens per sequence (T)").positive().with_unit("tokens"));
  t.add(S::integer("model.max_seq_len", m.max_seq_len,
                   "Longest model.seq_len the preset allows (its context length); 0 = no limit")
            .non_negative()
            .with_unit("tokens"));
  t.add(S::real("model.rope_base", m.rope_base, "RoPE frequency base theta").above(1));
  t.add(S::real("model.norm_eps", m.norm_eps, "RMSNorm epsilon").non_negative());
  t.add(S::boolean("model.tied_embeddings", m.tied_embeddings,
                   "The LM head reads the embedding table (stored once, in the embedding unit)"));

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
  t.add(S::enumeration("train.precision", {"fp32", "bf16-mixed", "fp64"}, std::string(workloads::to_string(tr.precision)),
                       "fp32; bf16-mixed (bf16 parameters and activations, fp32 gradients, master weights and "
                       "Adam moments); fp64 for tests only"));
  t.add(S::integer("train.seed", static_cast<std::int64_t>(tr.seed),
                   "Seed of the parameter initialisation (a function of seed and flat index only)")
            .non_negative());

  // ---- data: the source of sequences (workloads/data) --------------------------------------------
  t.add(S::enumeration("data.source", {"synthetic", "llmc", "nanogpt", "bytes"}, "synthetic",
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

  for (const ModelPreset& p : workloads::model_presets())
    t.add_preset("model.preset", p.name, preset_values(p), p.meaning);
}

workloads::LlamaConfig llama_config_from(const ResolvedConfig& c) {
  workloads::LlamaConfig m;
  m.preset = c.get_string("model.preset");
  m.layers = c.get_int("model.layers");
  m.hidden = c.get_int("model.hidden");
  m.heads = c.get_int("model.heads");
  m.kv_heads = c.get_int("model.kv_heads");
  m.head_dim = c.get_int("model.head_dim");
  m.ffn_hidden = c.get_int("model.ffn_hidden");
  m.vocab = c.get_int("model.vocab");
  m.seq_len = c.get_int("model.seq_len");
  m.max_seq_len = c.get_int("model.max_seq_len");
  m.rope_base = c.get_double("model.rope_base");
  m.norm_eps = c.get_double("model.norm_eps");
  m.tied_embeddings = c.get_bool("model.tied_embeddings");
  m.validate();
  return m;
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
  d.validate();
  return d;
}

}  // namespace hzp::harness
