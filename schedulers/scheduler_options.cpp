// The `scheduler.*` declarations (scheduler_options.hpp): one line per key, bound to its field.
#include "hzp/schedulers/scheduler_options.hpp"

#include <cstddef>
#include <limits>
#include <string>
#include <utility>

#include "hzp/core/enum_option.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {
namespace {

using S = OptionSpec;
const SchedulerOptions kDefaults{};

SchedulerOptionDecl int_option(std::string key, int SchedulerOptions::*field, std::string help) {
  S spec = S::integer(key, kDefaults.*field, std::move(help));
  return {std::move(spec), [key, field](const ResolvedConfig& c, SchedulerOptions& o) {
            o.*field = c.get_int32(key);
          }};
}

SchedulerOptionDecl real_option(std::string key, double SchedulerOptions::*field, std::string help) {
  S spec = S::real(key, kDefaults.*field, std::move(help));
  return {std::move(spec), [key, field](const ResolvedConfig& c, SchedulerOptions& o) { o.*field = c.get_double(key); }};
}

SchedulerOptionDecl bool_option(std::string key, bool SchedulerOptions::*field, std::string help) {
  S spec = S::boolean(key, kDefaults.*field, std::move(help));
  return {std::move(spec), [key, field](const ResolvedConfig& c, SchedulerOptions& o) { o.*field = c.get_bool(key); }};
}

// An enumeration whose allowed names, default's name and parsed value all come from the enum's name table.
template <typename E, std::size_t N>
SchedulerOptionDecl enum_option(std::string key, const EnumName<E> (&names)[N], E SchedulerOptions::*field,
                                std::string help) {
  S spec = enum_option_spec(key, names, kDefaults.*field, std::move(help));
  return {std::move(spec), [key, &names, field](const ResolvedConfig& c, SchedulerOptions& o) {
            o.*field = enum_value(c, key, names);
          }};
}

// The names of the enums only this table spells (those with a to_string elsewhere keep theirs beside the enum).
constexpr EnumName<SchedulerOptions::StepEnd> kStepEndNames[] = {
    {"allreduce", SchedulerOptions::StepEnd::all_reduce},
    {"reduce_scatter", SchedulerOptions::StepEnd::reduce_scatter}};
constexpr EnumName<SchedulerOptions::Launch> kLaunchNames[] = {{"unit", SchedulerOptions::Launch::unit},
                                                                {"tensor", SchedulerOptions::Launch::tensor}};
constexpr EnumName<SchedulerOptions::PoolFallback> kPoolFallbackNames[] = {
    {"error", SchedulerOptions::PoolFallback::error}, {"inline", SchedulerOptions::PoolFallback::inline_alloc}};

template <typename F>
SchedulerOptionDecl with(SchedulerOptionDecl d, F&& refine) {
  refine(d.spec);
  return d;
}

std::vector<SchedulerOptionDecl> declare() {
  using O = SchedulerOptions;
  std::vector<SchedulerOptionDecl> v;
  // ---- ddp and hsdp (docs/data-parallel.md) ----
  v.push_back(with(real_option("scheduler.bucket_mb", &O::bucket_mb,
                               "ddp: gradient bucket size; buckets are whole units, formed from the last unit backwards, "
                               "and each is all-reduced as soon as its gradients are final on the last micro-batch"),
                   [](S& s) { s.positive().with_unit("MiB"); }));
  v.push_back(bool_option("scheduler.overlap", &O::overlap,
                          "ddp: start each bucket's all-reduce non-blocking and wait for all at the end of backward "
                          "(true), or all-reduce each bucket inline, blocking (false)"));
  v.push_back(with(int_option("scheduler.group_size", &O::group_size,
                              "hsdp: sharding group size Z (contiguous ranks, inside a node when Z = "
                              "topology.ranks_per_node), replicated across W/Z groups; must divide the world size; "
                              "0 = the world (zero3)"),
                   [](S& s) { s.non_negative(); }));
  // ---- asynchzp (docs/data-parallel.md "asynchzp") ----
  v.push_back(with(int_option("scheduler.z1", &O::z1,
                              "asynchzp: optimizer-state group size (fp32 master, m, v sharded over z1 contiguous "
                              "ranks); must divide the world size (with scheduler.pp, a stage's W / pp ranks); 0 = all "
                              "of them"),
                   [](S& s) { s.non_negative(); }));
  v.push_back(with(int_option("scheduler.z2", &O::z2,
                              "asynchzp: gradient group size (fp32 reduce-scatter per micro-batch); must divide "
                              "scheduler.z1; 0 = z1"),
                   [](S& s) { s.non_negative(); }));
  v.push_back(with(int_option("scheduler.z3", &O::z3,
                              "asynchzp: parameter group size (all-gather per unit per micro-batch, forward and again "
                              "backward); must divide scheduler.z2; 0 = z2. z2 = z3 = topology.ranks_per_node keeps "
                              "every per-micro-batch collective inside a node"),
                   [](S& s) { s.non_negative(); }));
  v.push_back(enum_option(
      "scheduler.step_end", kStepEndNames, &O::step_end,
      "asynchzp: how gradient shards are combined across the W/z2 replicas at the end of a step: one all-reduce "
      "(the paper), or a reduce-scatter to W-th pieces and an all-gather among the W/z1 ranks holding the same "
      "optimizer slice"));
  v.push_back(bool_option("scheduler.async", &O::async,
                          "asynchzp: issue the collectives from two background threads with their own communicators "
                          "(true), or inline on the compute thread (false: the paper's Table 3 ablation)"));
  v.push_back(bool_option("scheduler.pp_reuse", &O::pp_reuse,
                          "asynchzp (pp > 1): a gathered parameter block is held to the stage's next use of it when "
                          "at most one other action runs in between (neighbouring micro-batches share one all-gather; "
                          "with one chunk per stage, one per step: the stage's parameters stay whole); false gathers "
                          "per action (the ablation)"));
  v.push_back(bool_option("scheduler.rs_merge", &O::rs_merge,
                          "asynchzp (pp > 1): gradients of consecutive backwards of a stage (the cool-down) are summed "
                          "in the full block and reduce-scattered once per run; false reduce-scatters every "
                          "micro-batch"));
  v.push_back(enum_option(
      "scheduler.tied_split", O::kTiedSplitNames, &O::tied_split,
      "asynchzp: exchange the tied embedding table's gradient in two parts: the dense part (the head's contributions, "
      "the lookup's of all but the last micro-batch) as soon as the last micro-batch's head backward is done, and the "
      "last micro-batch's looked-up rows (row ids + values) after the embedding's backward, sent to the ranks whose "
      "optimizer slices they fall in (rows_alltoall: an all-to-all-v, about T·(W-1)/z1 rows per rank) or "
      "all-gathered over the data × context ranks (rows_allgather: (W-1)·T rows per rank, sizes independent of the "
      "data), T the rank's tokens of a micro-batch (micro_batch_size · seq_len / cp); needs model.tied_embeddings, "
      "the CPU backend and pp = 1"));
  v.push_back(with(int_option("scheduler.prefetch", &O::prefetch,
                              "asynchzp (async): parameter all-gathers queued ahead of the unit being computed, in "
                              "units; the pool's all_gather ring bounds it too"),
                   [](S& s) { s.positive(); }));
  v.push_back(enum_option("scheduler.launch", kLaunchNames, &O::launch,
                          "asynchzp: one collective per unit, or one per parameter tensor (the paper's "
                          "granularity; each tensor sharded and padded on its own)"));
  v.push_back(with(real_option("scheduler.pool_mb", &O::pool_mb,
                               "asynchzp (async): the persistent communication ring pool (rings all_gather, "
                               "all_gather.shared, reduce_scatter, reduce_scatter.shared); 0 = sized from "
                               "scheduler.prefetch and the largest units"),
                   [](S& s) { s.non_negative().with_unit("MiB"); }));
  v.push_back(enum_option(
      "scheduler.pool_fallback", kPoolFallbackNames, &O::pool_fallback,
      "asynchzp (async): a unit whose block does not fit its ring is a configuration error, or is gathered / "
      "reduce-scattered inline from the caching allocator and counted"));
  // ---- nd (docs/nd-parallel.md) ----
  v.push_back(with(int_option("scheduler.tp", &O::tp,
                              "nd: tensor-parallel degree: attention heads, KV heads, the MLP width and the vocabulary "
                              "split over tp consecutive ranks (inside a node); dp = W / (tp · cp · pp)"),
                   [](S& s) { s.positive(); }));
  v.push_back(bool_option("scheduler.sequence_parallel", &O::sequence_parallel,
                          "nd: sequence parallelism inside the tensor-parallel group (norms and residuals on 1/tp of "
                          "the tokens; all-gathers and reduce-scatters instead of all-reduces)"));
  v.push_back(bool_option("scheduler.distributed_optimizer", &O::distributed_optimizer,
                          "nd: Megatron's distributed optimizer over the dp group (gradients reduce-scattered, AdamW "
                          "on the rank's shard, parameters all-gathered); false = full replicas and a bucketed "
                          "all-reduce (scheduler.bucket_mb, scheduler.overlap)"));
  v.push_back(bool_option("scheduler.tp_across_nodes", &O::tp_across_nodes,
                          "nd: allow a tensor-parallel group to span virtual nodes (its collectives then run at "
                          "inter-node bandwidth on every layer)"));
  v.push_back(with(int_option("scheduler.pp", &O::pp,
                              "nd, asynchzp: pipeline stages, each a contiguous range of units (the embedding on the "
                              "first, the head on the last); stages are the outermost mesh axis; dp = W / (tp · cp · pp). "
                              "asynchzp shards each stage's units over that stage's ranks (z1 | W / pp)"),
                   [](S& s) { s.positive(); }));
  v.push_back(enum_option(
      "scheduler.schedule", kPipelineScheduleNames, &O::schedule,
      "nd, asynchzp (pp > 1): every forward then every backward (gpipe), Megatron's one-forward-one-backward (1f1b), or "
      "its interleaved 1F1B over scheduler.virtual_stages chunks per stage"));
  v.push_back(with(int_option("scheduler.virtual_stages", &O::virtual_stages,
                              "nd, asynchzp (interleaved): chunks per stage, each rank holding v non-contiguous chunks; the "
                              "micro-batches per data-parallel rank must be a multiple of scheduler.pp"),
                   [](S& s) { s.positive(); }));
  {
    S spec = S::int_list("scheduler.pp_layers", {}, "nd, asynchzp (pp > 1, v = 1): blocks per stage, first stage first, "
                                                    "summing to model.layers (empty: balanced, the first stages "
                                                    "taking one more when they do not divide)");
    spec.positive();
    v.push_back({std::move(spec), [](const ResolvedConfig& c, SchedulerOptions& o) {
                   o.pp_layers.clear();
                   for (std::int64_t b : c.get_int_list("scheduler.pp_layers")) {
                     if (b > std::numeric_limits<int>::max())
                       HZP_THROW(ConfigError, "scheduler.pp_layers holds ", b, ", beyond any model's blocks. Fix: "
                                 "blocks per stage summing to model.layers, e.g. 2,2 for 4 layers on 2 stages");
                     o.pp_layers.push_back(static_cast<int>(b));
                   }
                 }});
  }
  v.push_back(with(int_option("scheduler.cp", &O::cp,
                              "nd, asynchzp: context-parallel degree: every sequence cut into 2·cp chunks, rank r of "
                              "the group holding chunks r and 2·cp−1−r, attention as ring attention over the group; "
                              "model.seq_len must divide by 2·cp; the mesh nests pp, dp, cp, tp; dp = W / (tp · cp · pp). "
                              "asynchzp lays its z-groups over the dp · cp ranks, cp innermost: z3 = cp puts the "
                              "parameter groups on exactly the cp groups, and z1 must be a multiple of cp"),
                   [](S& s) { s.positive(); }));
  v.push_back(with(int_option("scheduler.ep", &O::ep,
                              "nd: expert-parallel degree: every MoE block's routed experts split over ep consecutive "
                              "ranks of the data × context group (the cp ranks of a sequence first; model.experts / ep "
                              "each), tokens sent to their experts' ranks and back by all-to-all-v; those ranks stay "
                              "data-parallel for every other weight; ep must divide dp · cp = W / (tp · pp) and "
                              "model.experts. Under tp the experts stay whole and each tp rank runs them on its 1/tp of "
                              "the token rows. With scheduler.distributed_optimizer the expert pieces' optimizer state "
                              "is sharded over their expert-data group (dp · cp / ep ranks), the rest over data × "
                              "context"),
                   [](S& s) { s.positive(); }));
  {
    S spec = S::real("scheduler.debug_unit_sleep_ms", kDefaults.debug_unit_sleep_ms,
                     "benchmark hook: sleep this long after every block's forward and backward (the ends take none), "
                     "every engine and pipeline stage, so a step is measured against a known unit time that costs no "
                     "CPU (a pipeline's bubble; the simulator against a run, whose calibration sleeps alike); refused "
                     "by `run` and `simulate` unless HZPBENCH_BENCHMARK_HOOKS=1");
    spec.non_negative().with_unit("ms");
    spec.hidden = true;
    v.push_back({std::move(spec), [](const ResolvedConfig& c, SchedulerOptions& o) {
                   o.debug_unit_sleep_ms = c.get_double("scheduler.debug_unit_sleep_ms");
                 }});
  }
  return v;
}

}  // namespace

const std::vector<SchedulerOptionDecl>& scheduler_option_decls() {
  static const std::vector<SchedulerOptionDecl> decls = declare();
  return decls;
}

void register_scheduler_options(OptionTable& table) {
  for (const SchedulerOptionDecl& d : scheduler_option_decls()) table.add(d.spec);
}

SchedulerOptions scheduler_options_from(const ResolvedConfig& config) {
  SchedulerOptions o;
  for (const SchedulerOptionDecl& d : scheduler_option_decls()) d.read(config, o);
  return o;
}

}  // namespace hzp::schedulers
