// The keys of `hzpbench run` (run_options.hpp): registration, typed read-back, the embedded default
// configuration and the default scheduler by world size, and the default output path.
#include "hzp/harness/run_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/harness/link_profiles.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::harness {
namespace {

using S = OptionSpec;

// The multi-rank schedulers the embedded default prefers, best first: the first one registered wins.
constexpr const char* kDefaultMultiRankSchedulers[] = {"zero3", "zero2", "zero1", "ddp"};

bool parse_int(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

}  // namespace

void register_run_keys(OptionTable& t) {
  // ---- scheduler, backend, device: what runs the step (schedulers/, the device peak for MFU) ------
  // The allowed names come from the scheduler registry, so registering a scheduler is the only change
  // needed for the key to accept it (docs/options.md is then regenerated).
  t.add(S::enumeration("scheduler.name", schedulers::scheduler_names(), "none",
                       "Training-step scheduler: none = the single-rank reference (one rank only); ddp, "
                       "zero1, zero2, zero3, hsdp = synchronous data parallelism; asynchzp = hierarchical "
                       "sharding (scheduler.z1/z2/z3), communication inline or on background threads"));
  t.add(S::enumeration("backend", {"cpu", "cuda"}, "cpu",
                       "Where compute and communication run: cpu (OpenBLAS kernels, MPI on host "
                       "buffers); cuda = one GPU per rank, NCCL between them: state and activations in device "
                       "memory, the CUDA kernels on one stream; every scheduler, pipeline stages and context "
                       "parallelism included, without an MoE model; train.deterministic refuses it (docs/cuda.md)"));
  t.add(S::real("device.peak_tflops", 0,
                "Declared peak of one rank's device, the denominator of MFU; 0 = the device table for "
                "known GPUs, or on the CPU a single-core sgemm measured at start (recorded)")
            .non_negative()
            .with_unit("TFLOP/s"));

  // ---- links: a real cluster's communication-to-compute ratio (link_profiles.cpp) -----------------
  t.add(S::enumeration("links.profile", {"none", "h100-dgx", "paper-npu", "custom"}, "none",
                       "Set the emulated bandwidths from a cluster's FLOP per byte and the compute rate "
                       "measured at start: none = use links.*.bandwidth_gbps as given; h100-dgx (989 "
                       "TFLOP/s, NVLink 450 GB/s, 50 GB/s per GPU across nodes); paper-npu (300 TFLOP/s, "
                       "~400 GB/s in an 8-card mesh, 200 Gb/s RoCE); custom = links.custom.*. Applied when "
                       "links.emulate = true"));
  t.add(S::real("links.custom.intra_flop_per_byte", kH100Dgx.intra_flop_per_byte(),
                "links.profile = custom: FLOPs the cluster computes per byte sent inside a node")
            .positive()
            .with_unit("FLOP/B"));
  t.add(S::real("links.custom.inter_flop_per_byte", kH100Dgx.inter_flop_per_byte(),
                "links.profile = custom: FLOPs the cluster computes per byte sent between nodes")
            .positive()
            .with_unit("FLOP/B"));
  t.add(S::real("links.comm_to_compute", 0,
                "Instead of a profile's inter-node ratio: set the inter-node bandwidth so that the bf16 "
                "parameter bytes x 2 per micro-batch (ZeRO-3's all-gather volume) take this many times "
                "the measured compute time; intra-node keeps the profile's intra/inter ratio. 0 = off")
            .non_negative());

  // ---- simulate: where `hzpbench simulate` takes each unit's compute time (docs/simulate.md) ---------
  t.add(S::enumeration("simulate.calibration", {"measure", "profile"}, "measure",
                       "hzpbench simulate's compute times: measure = each unit's forward and backward timed on "
                       "one rank of this machine at the run's shapes (links from links.* as a run derives them); "
                       "profile = each unit's share of the model FLOPs at links.profile's peak times simulate.mfu, "
                       "with the profile's own bandwidths and cards per node (links.profile must name a cluster)"));
  t.add(S::real("simulate.mfu", 0.5,
                "simulate.calibration = profile: the fraction of the profile's peak a unit's compute reaches "
                "(assumed, recorded in the results file)")
            .positive()
            .at_most(1));
  t.add(S::boolean("simulate.fold", true,
                   "hzpbench simulate: simulate one set of ranks per role (ranks whose step descriptions the model "
                   "cannot tell apart) and give its results to the others; false = every rank simulated. Results are "
                   "the same either way; with data.packing = documents nothing is folded (docs/simulate.md \"Scale\")"));

  // ---- output: the results file and the trace (results_file.hpp, trace.cpp) -----------------------
  t.add(S::string("output.path", "",
                  "Results file (HDF5); empty = results/<UTC time>-<config hash>.h5. Never overwritten "
                  "unless output.force or --force"));
  t.add(S::real("output.flush_s", 5,
                "Flush the results file at most this often (a killed run loses at most this much); "
                "0 = after every step")
            .non_negative()
            .with_unit("s"));
  t.add(S::boolean("output.trace", false,
                   "Also write a Chrome/Perfetto trace beside the results file (<results>.trace.json): per "
                   "rank and thread, every unit's compute and every collective"));
  t.add(S::boolean("output.force", false, "Overwrite an existing results file (same as --force)"));
  // ---- output: checkpoints (checkpoint_io.cpp, run_checkpoints.cpp; docs/checkpoints.md) ----------
  t.add(S::integer("output.checkpoint_every", 0,
                   "Write a checkpoint after every this many steps (and after the step a caught SIGTERM, SIGINT or "
                   "SIGUSR1 stopped the run at: status preempted, exit 5); 0 = off. hzpbench run --resume continues "
                   "from one")
            .non_negative()
            .with_unit("steps"));
  t.add(S::string("output.checkpoint_dir", "",
                  "Folder of the checkpoints, <results stem>.step<N>.ckpt.h5; empty = beside the results file"));
  t.add(S::integer("output.checkpoint_keep", 2,
                   "Checkpoints of this run kept: after a new one is complete, rank 0 removes this run's older ones "
                   "beyond the most recent K; 0 = keep every one")
            .non_negative());
  t.add(S::boolean("output.checkpoint_on_signal", false,
                   "Checkpoint after the step a caught SIGTERM, SIGINT or SIGUSR1 stopped the run at (status "
                   "preempted, exit 5) even with output.checkpoint_every = 0: what a Slurm job that is requeued on "
                   "--signal needs (slurm/sweep sets it). Off, with a note, in a run without training state (the "
                   "collective-only stand-in)"));

  // ---- harness: run-loop policies (run_loop.cpp, watchdog.cpp, metrics.cpp) -----------------------
  t.add(S::real("harness.watchdog_s", 900,
                "A rank that makes no progress for this long prints its last collectives and aborts "
                "the job (the results file says failed); 0 = off")
            .non_negative()
            .with_unit("s"));
  t.add(S::integer("harness.warmup_steps", 2, "First steps left out of the summary (still recorded)")
            .non_negative()
            .with_unit("steps"));
  t.add(S::integer("harness.skip_nonfinite", 0,
                   "Steps with a NaN or infinite loss tolerated (recorded, marked skipped) before the run "
                   "stops as diverged")
            .non_negative()
            .with_unit("steps"));
  t.add(S::integer("harness.spike_window", 20,
                   "Trailing window (steps) of the loss and gradient-norm spike statistics")
            .at_least(2)
            .with_unit("steps"));
  t.add(S::real("harness.spike_threshold", 4,
                "A loss or gradient norm more than this many standard deviations above the mean of the "
                "trailing window counts as a spike")
            .positive());
  t.add(S::enumeration("harness.cpu_threads", {"pool", "openblas"}, "pool",
                       "How a rank's CPU threads share its kernels: pool = hzpbench's intra-op pool splits every "
                       "GEMM by column blocks (OpenBLAS single-threaded in each) and the element-wise, row and "
                       "attention kernels; openblas = OpenBLAS threads its GEMMs and every other kernel runs on "
                       "the compute thread. Deterministic mode runs one thread either way"));

  // ---- debug: fault injection for the harness's own tests (documented here, hidden from list) -----
  t.add(S::string("debug.throw_at", "", "Test hook: rank R throws an error before step S (\"R:S\")").hide());
  t.add(S::string("debug.stall_at", "",
                  "Test hook: rank R stops making progress before step S (\"R:S\"), for the watchdog")
            .hide());
  t.add(S::integer("debug.nan_at", -1, "Test hook: the loss of this step reads NaN (-1 = off)").at_least(-1).hide());
  t.add(S::boolean("debug.collective_only", false,
                   "Test hook: replace the scheduler by a collective-only step (an all-reduce per "
                   "micro-batch, no model compute), so the run loop can be tested at any world size")
            .hide());
}

FaultSpec parse_fault_spec(const std::string& key, const std::string& text) {
  if (text.empty()) return {};
  const auto colon = text.find(':');
  std::int64_t rank = 0, step = 0;
  if (colon == std::string::npos || !parse_int(std::string_view(text).substr(0, colon), rank) ||
      !parse_int(std::string_view(text).substr(colon + 1), step) || rank > 1'000'000)
    HZP_THROW(ConfigError, key, " = \"", text, "\" is not \"rank:step\" (two non-negative integers). Fix: e.g. --set ",
              key, "=1:3, or leave it empty");
  return {static_cast<int>(rank), step};
}

RunOptions run_options_from(const ResolvedConfig& c) {
  RunOptions o;
  o.scheduler = c.get_string("scheduler.name");
  o.backend = c.get_string("backend");
  o.links_profile = c.get_string("links.profile");
  o.comm_to_compute = c.get_double("links.comm_to_compute");
  o.custom_intra_flop_per_byte = c.get_double("links.custom.intra_flop_per_byte");
  o.custom_inter_flop_per_byte = c.get_double("links.custom.inter_flop_per_byte");
  o.peak_tflops = c.get_double("device.peak_tflops");
  o.sim_calibration = c.get_string("simulate.calibration");
  o.sim_mfu = c.get_double("simulate.mfu");
  o.sim_fold = c.get_bool("simulate.fold");
  o.output_path = c.get_string("output.path");
  o.flush_s = c.get_double("output.flush_s");
  o.trace = c.get_bool("output.trace");
  o.force = c.get_bool("output.force");
  o.checkpoint_every = c.get_int("output.checkpoint_every");
  o.checkpoint_dir = c.get_string("output.checkpoint_dir");
  o.checkpoint_keep = c.get_int("output.checkpoint_keep");
  o.checkpoint_on_signal = c.get_bool("output.checkpoint_on_signal");
  o.watchdog_s = c.get_double("harness.watchdog_s");
  o.warmup_steps = c.get_int("harness.warmup_steps");
  o.skip_nonfinite = c.get_int("harness.skip_nonfinite");
  o.spike_window = c.get_int("harness.spike_window");
  o.spike_threshold = c.get_double("harness.spike_threshold");
  o.intra_op_pool = c.get_string("harness.cpu_threads") == "pool";
  o.throw_at = parse_fault_spec("debug.throw_at", c.get_string("debug.throw_at"));
  o.stall_at = parse_fault_spec("debug.stall_at", c.get_string("debug.stall_at"));
  o.nan_at = c.get_int("debug.nan_at");
  o.collective_only = c.get_bool("debug.collective_only");
  return o;
}

std::optional<std::string> default_scheduler(int world_size) {
  if (world_size <= 1) return std::string("none");
  const std::vector<std::string> names = schedulers::scheduler_names();
  for (const char* preferred : kDefaultMultiRankSchedulers)
    if (std::find(names.begin(), names.end(), preferred) != names.end()) return std::string(preferred);
  return std::nullopt;
}

std::string embedded_default_toml(int world_size) {
  std::ostringstream os;
  os << "# hzpbench's embedded default (hzpbench run without --config): the model preset, the scheduler\n"
        "# for the world size and the links; every other key keeps its preset's or its own default.\n"
        "[model]\npreset = \"small\"\n";
  if (const auto s = default_scheduler(world_size)) os << "[scheduler]\nname = \"" << *s << "\"\n";
  // The H100 cluster's ratios, converted with the compute rate the run measures (link_profiles.cpp).
  os << "[links]\nemulate = true\nprofile = \"h100-dgx\"\n";
  return os.str();
}

std::string config_hash(const ResolvedConfig& config) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char ch : config.to_toml(false)) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>((h >> 32) ^ (h & 0xffffffffu)));
  return buf;
}

std::string default_output_path(const ResolvedConfig& config, double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  return std::string("results/") + stamp + "-" + config_hash(config) + ".h5";
}

std::string numbered_path(const std::string& path, int n) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "-" + std::to_string(n) + p.extension().string())).string();
}

}  // namespace hzp::harness
