// Resolution and validation of a run's configuration (run_setup.hpp).
#include "run_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string_view>

#include "hzp/core/device.hpp"
#include "hzp/core/enum_option.hpp"
#include "hzp/core/error.hpp"
#include "hzp/harness/link_profiles.hpp"
#include "hzp/harness/model_options.hpp"
#include "hzp/harness/option_keys.hpp"
#include "hzp/harness/scheduler_options.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "run_checkpoints.hpp"

namespace hzp::harness {
namespace {

std::string registered_schedulers() {
  std::string s;
  for (const std::string& n : schedulers::scheduler_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

ResolvedConfig resolve_run_config(const RunCliArgs& a, int world_size) {
  ConfigResolver r(hzpbench_options());
  if (a.config.config_file.empty())
    r.add_toml_text(embedded_default_toml(world_size), "embedded default");
  else
    r.add_file(a.config.config_file);
  for (const std::string& s : a.config.sets) r.add_set(s);
  if (!a.out.empty()) r.add_set("output.path=" + a.out);
  if (a.force) r.add_set("output.force=true");
  ResolvedConfig cfg = r.resolve();
  fit_warmup_to_steps(cfg);
  return cfg;
}

void fit_warmup_to_steps(ResolvedConfig& cfg) {
  // A short first try (`--set model.preset=tiny --set train.steps=10`) should run: a warm-up the user did
  // not set, longer than the run, keeps its preset's share of the run instead (tiny: 30 of 300 steps, so 1
  // of 10). A warm-up set explicitly is the user's and is checked as given.
  const std::int64_t steps = cfg.get_int("train.steps"), warmup = cfg.get_int("train.warmup_steps");
  if (steps <= 0 || warmup <= steps) return;
  const std::optional<OptionValue> preset_steps = cfg.preset_value("model.preset", "train.steps");
  const std::int64_t of = preset_steps ? std::get<std::int64_t>(*preset_steps) : warmup;
  const std::int64_t fitted = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(std::llround(static_cast<double>(warmup) * static_cast<double>(steps) / static_cast<double>(of))),
      0, steps);
  cfg.fit_unset("train.warmup_steps", fitted,
                "scaled from " + std::to_string(warmup) + " of " + std::to_string(of) + " steps to train.steps = " +
                    std::to_string(steps));
}

coll::MpiCommConfig mpi_comm_config_from(const ResolvedConfig& cfg) {
  coll::MpiCommConfig c;
  c.wait_policy = enum_value(cfg, "collectives.wait_policy", coll::kWaitPolicyNames);
  c.backoff_max_us = cfg.get_double("collectives.backoff_max_us");
  c.timeout_s = cfg.get_double("collectives.timeout_s");
  c.small_message_bytes = static_cast<std::size_t>(cfg.get_int("collectives.small_message_bytes"));
  c.mpi_native = cfg.get_bool("collectives.mpi_native");
  c.transport = enum_value(cfg, "collectives.transport", coll::kTransportNames);
  c.shm_slot_bytes = static_cast<std::size_t>(cfg.get_int("collectives.shm_slot_bytes"));
  c.shm_slots = static_cast<int>(cfg.get_int("collectives.shm_slots"));
  c.single_copy_bytes = static_cast<std::size_t>(cfg.get_int("collectives.single_copy_bytes"));
  c.mapped_buffers = cfg.get_bool("collectives.mapped_buffers");
  c.links.enabled = cfg.get_bool("links.emulate");
  c.links.intra = {cfg.get_double("links.intra.latency_us"), cfg.get_double("links.intra.bandwidth_gbps")};
  c.links.inter = {cfg.get_double("links.inter.latency_us"), cfg.get_double("links.inter.bandwidth_gbps")};
  return c;
}

std::vector<std::int64_t> parse_dump_steps(const std::string& text, std::int64_t steps) {
  std::vector<std::int64_t> out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 0)
      HZP_THROW(ConfigError, "--dump-tensors '", text, "': '", item,
                "' is not a step index. Fix: a comma-separated list of steps counted from 0, e.g. 0,5,9");
    if (v >= steps)
      HZP_THROW(ConfigError, "--dump-tensors '", text, "': step ", v, " is beyond the run (train.steps = ", steps,
                ", steps 0..", steps - 1, ")");
    out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void check_output_path(const std::string& path, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec))
    HZP_THROW(ConfigError, "output.path = '", path, "' is a directory. Fix: name a file, e.g. ", (p / "run.h5").string());
  if (fs::exists(p, ec) && !force)
    HZP_THROW(ConfigError, "output.path = '", path, "' already exists and is never overwritten. Fix: --force (or "
              "output.force = true) to replace it, or another --out");
  // The nearest existing ancestor must be a writable directory (missing parents are created later).
  fs::path dir = fs::absolute(p, ec).parent_path();
  while (!dir.empty() && !fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  if (!fs::is_directory(dir, ec))
    HZP_THROW(ConfigError, "output.path = '", path, "': '", dir.string(), "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    HZP_THROW(ConfigError, "output.path = '", path, "': the directory '", dir.string(),
              "' is not writable. Fix: --out a path in a writable directory");
}

RunSetup plan_run(const ResolvedConfig& cfg, int world_size, const std::string& dump_tensors) {
  RunSetup s;
  s.world_size = world_size;
  s.opt = run_options_from(cfg);
  // Checked before the backend's own checks, so that this reason is the one given: the fixed-point kernels have no
  // CUDA twin and cuBLASLt's bitwise reproducibility is not established (docs/deterministic.md).
  if (s.opt.backend == "cuda" && cfg.get_bool("train.deterministic"))
    HZP_THROW(ConfigError, "train.deterministic = true with backend = cuda: deterministic mode covers the CPU "
              "backend only (docs/deterministic.md). Fix: backend = cpu, or train.deterministic = false");
  // The MoE layer's router and dispatch have no CUDA kernels yet (docs/workloads.md, Mixture of Experts).
  if (s.opt.backend == "cuda" && cfg.get_int("model.experts") > 0)
    HZP_THROW(ConfigError, "model.experts = ", cfg.get_int("model.experts"), " with backend = cuda: the MoE layer "
              "runs on the CPU only for now (no CUDA kernels for its router and expert dispatch). Fix: backend = cpu, "
              "or model.experts = 0 for the dense model");
  // On a GPU documents are masked by the unfused attention kernels; cuDNN's fused graph here is plain causal
  // (docs/data.md, Document packing), so `auto` runs unfused and an explicit `fused` is refused up front.
  if (s.opt.backend == "cuda" && cfg.get_string("data.packing") == "documents" &&
      cfg.get_string("model.attention") == "fused")
    HZP_THROW(ConfigError, "data.packing = documents with model.attention = fused: cuDNN's fused attention here has "
              "no document mask. Fix: model.attention = auto or unfused (the unfused CUDA kernels mask documents), or "
              "data.packing = none");
  // Pipeline stages and context parallelism run on the GPU (docs/cuda.md, "Pipeline on the GPU" and "Context
  // parallelism on the GPU"); what stays host-only is refused below (the scheduler's registry) and above (MoE).
  if (s.opt.backend == "cuda") {
    // The CUDA kernels, device memory and streams exist (docs/cuda.md); what runs a step on them is the
    // scheduler: every registered one does (nd without MoE, refused above and by nd's factory); a
    // new scheduler stays host-only until its registry entry says otherwise.
    if (!cuda_compiled())
      HZP_THROW(ConfigError, "backend = cuda: this hzpbench was built without CUDA. Fix: rebuild with "
                "-DHZP_CUDA=ON on a machine with the CUDA toolkit, or backend = cpu");
    const std::vector<std::string> gpu = schedulers::cuda_scheduler_names();
    if (std::find(gpu.begin(), gpu.end(), s.opt.scheduler) == gpu.end()) {
      std::string names;
      for (const std::string& n : gpu) names += (names.empty() ? "" : ", ") + n;
      HZP_THROW(ConfigError, "backend = cuda runs scheduler.name = ", names, ". scheduler.name = ", s.opt.scheduler,
                " keeps its buffers in host memory. Fix: one of those, or backend = cpu");
    }
  }
  validate_link_profile(s.opt.links_profile);
  if (s.opt.backend != "cuda" && cfg.get_string("model.attention") == "fused")
    HZP_THROW(ConfigError, "model.attention = fused is cuDNN's kernel and runs on a GPU, but backend = ", s.opt.backend,
              ". Fix: model.attention = auto (the CPU runs its tiled kernel), or backend = cuda");
  s.model = workloads::model_spec_from(cfg);
  s.train = train_config_from(cfg);
  s.data = data_config_from(cfg);
  s.comm = mpi_comm_config_from(cfg);
  s.comm.validate();

  const std::int64_t want_w = cfg.get_int("topology.world_size");
  if (want_w != 0 && want_w != world_size)
    HZP_THROW(ConfigError, "topology.world_size = ", want_w, " but the job has ", world_size, " rank",
              world_size == 1 ? "" : "s", " (mpiexec -n). Fix: set it to ", world_size, " or 0 (= from MPI)");

  // Which ranks share the batch: every rank for a data-parallel scheduler; `none` takes one rank only.
  if (s.opt.collective_only) {
    s.uses_world_comm = true;
    s.dp = world_size;
  } else if (s.opt.scheduler == "none") {
    if (world_size != 1)
      HZP_THROW(ConfigError, "scheduler.name = none is the single-rank reference and runs on 1 rank, but the job has ",
                world_size, " ranks. Registered schedulers: ", registered_schedulers(),
                ". Fix: run on one rank (without mpiexec, or mpiexec -n 1); multi-rank runs need a distributed "
                "scheduler (ddp, zero1, zero2, zero3, hsdp, asynchzp, nd)");
    s.uses_world_comm = false;
    s.dp = 1;
  } else {
    s.uses_world_comm = true;
    s.dp = world_size;  // until the scheduler's degrees say otherwise (below)
  }
  s.sched = scheduler_options_from(cfg);
  if (s.sched.debug_unit_sleep_ms > 0) {
    const char* hooks = std::getenv("HZPBENCH_BENCHMARK_HOOKS");
    if (hooks == nullptr || std::string_view(hooks) != "1")
      HZP_THROW(ConfigError, "scheduler.debug_unit_sleep_ms = ", s.sched.debug_unit_sleep_ms, " adds a sleep to "
                "every block's compute: a hook for benchmarks against a known unit time (a pipeline's bubble, the "
                "simulator against a run), not a training run. Fix: leave it at 0, or set HZPBENCH_BENCHMARK_HOOKS=1 "
                "in a benchmark (scripts/pipeline_bubble.sh and scripts/simulate_vs_run.py --unit-sleep-ms do)");
  }
  if (s.opt.scheduler != "nd" && s.opt.scheduler != "asynchzp" &&
      (s.sched.pp != 1 || !s.sched.pp_layers.empty() || s.sched.virtual_stages != 1))
    HZP_THROW(ConfigError, "scheduler.pp = ", s.sched.pp, ", scheduler.virtual_stages = ", s.sched.virtual_stages,
              " and scheduler.pp_layers are the pipeline keys of nd and asynchzp, but scheduler.name = ",
              s.opt.scheduler, ". Fix: scheduler.name = nd or asynchzp, or leave them at their defaults");
  if (s.opt.scheduler != "nd" && s.opt.scheduler != "asynchzp" && s.sched.cp != 1)
    HZP_THROW(ConfigError, "scheduler.cp = ", s.sched.cp, " is the context-parallel degree of nd and asynchzp, but "
              "scheduler.name = ", s.opt.scheduler, ". Fix: scheduler.name = nd or asynchzp, or scheduler.cp = 1");
  if (s.opt.scheduler != "nd" && s.sched.ep != 1)
    HZP_THROW(ConfigError, "scheduler.ep = ", s.sched.ep, " is the expert-parallel degree of nd, but scheduler.name = ",
              s.opt.scheduler, " (the data-parallel engines shard and gather expert weights like dense ones). Fix: "
              "scheduler.name = nd, or scheduler.ep = 1");
  if (!s.opt.collective_only) {
    // The scheduler's own checks (group sizes dividing the world, ...) without building it.
    const workloads::ParamLayout layout = s.model->layout();
    schedulers::PlanInputs in;
    in.layout = &layout;
    in.model = s.model.get();
    in.train = s.train;
    in.options = s.sched;
    in.world_size = world_size;
    in.ranks_per_node = cfg.get_int32("topology.ranks_per_node");
    in.rank = 0;
    in.small_message_bytes = static_cast<std::size_t>(cfg.get_int("collectives.small_message_bytes"));
    s.plan = schedulers::plan_scheduler(s.opt.scheduler, in);
    s.dims = schedulers::scheduler_parallel_dims(s.opt.scheduler, s.sched, world_size);
    s.dp = s.dims.dp();  // the ranks that share the batch: nd's tensor-parallel ranks share one micro-batch
  } else {
    s.dims.dp_replicate = world_size;  // the collective-only stand-in all-reduces over every rank
  }
  const workloads::BatchPlan plan(s.train.global_batch, s.train.micro_batch_size, s.dp);  // ConfigError if it does not divide
  (void)plan;

  for (const auto& [key, f] : {std::pair{"debug.throw_at", s.opt.throw_at}, std::pair{"debug.stall_at", s.opt.stall_at}})
    if (f.active() && f.rank >= world_size)
      HZP_THROW(ConfigError, key, " = \"", f.rank, ":", f.step, "\" names rank ", f.rank, " but the job has ranks 0..",
                world_size - 1);
  s.dump_steps = parse_dump_steps(dump_tensors, s.train.steps);
  if (!s.dump_steps.empty() && s.dims.pp > 1)
    HZP_THROW(ConfigError, "--dump-tensors with scheduler.pp = ", s.dims.pp, ": the dump gathers state on rank 0, "
              "which holds the first pipeline stage only. Fix: dump from the same run at scheduler.pp = 1 (the "
              "pipeline's parity with it is what test_nd checks)");

  if (s.opt.checkpoint_every > 0)
    check_checkpoint_support(s, "output.checkpoint_every = " + std::to_string(s.opt.checkpoint_every));
  // A checkpoint on the signal only is asked for by whole sweeps (slurm/sweep), some of whose tasks may be layouts
  // that cannot be checkpointed yet: such a task runs without it (a signal then ends it as terminated), said here.
  if (s.opt.checkpoint_every == 0 && s.opt.checkpoint_on_signal) {
    if (const std::string no = checkpoint_unsupported(s); !no.empty()) {
      s.opt.checkpoint_on_signal = false;
      s.notes.push_back("output.checkpoint_on_signal = true is off for this run: " + no +
                        "; a signal ends it without a checkpoint");
    }
  }
  if (!s.opt.checkpoint_dir.empty() && s.opt.checkpoints_on() && !std::filesystem::is_directory(s.opt.checkpoint_dir))
    HZP_THROW(ConfigError, "output.checkpoint_dir = \"", s.opt.checkpoint_dir, "\" is not a folder. Fix: create it, or "
              "leave the key empty (checkpoints beside the results file)");
  if (s.opt.warmup_steps >= s.train.steps)
    s.notes.push_back("harness.warmup_steps = " + std::to_string(s.opt.warmup_steps) + " >= train.steps = " +
                      std::to_string(s.train.steps) + ": no step will be measured in the summary");
  if (!s.uses_world_comm && (s.comm.links.enabled || s.opt.comm_to_compute > 0))
    s.notes.push_back("links: scheduler " + s.opt.scheduler + " has no communicator, so no link is emulated");
  return s;
}

LinkPlanInput link_plan_input(const RunSetup& setup) {
  LinkPlanInput in;
  in.profile = setup.opt.links_profile;
  in.custom_intra_flop_per_byte = setup.opt.custom_intra_flop_per_byte;
  in.custom_inter_flop_per_byte = setup.opt.custom_inter_flop_per_byte;
  in.comm_to_compute = setup.opt.comm_to_compute;
  in.given = setup.comm.links;
  in.num_params = setup.model->num_params();
  return in;
}

}  // namespace hzp::harness
