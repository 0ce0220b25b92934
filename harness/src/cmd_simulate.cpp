// `hzpbench simulate` (docs/simulate.md): the run's configuration for topology.world_size ranks, without MPI:
// one rank of this machine measures each unit's forward and backward at the run's shapes (the calibration), the
// links come out of the same profile arithmetic a run uses with that rate, and every rank's step is simulated
// from the engine's own step description (schedulers::describe_step); the results file has the run's schema
// with `simulated = 1` and the calibration's provenance.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/intra_op.hpp"
#include "hzp/harness/compute_rate.hpp"
#include "hzp/harness/link_profiles.hpp"
#include "hzp/harness/packing_imbalance.hpp"
#include "hzp/harness/results_file.hpp"
#include "hzp/harness/run_options.hpp"
#include "hzp/harness/scheduler_options.hpp"
#include "hzp/harness/step_fold.hpp"
#include "hzp/harness/step_simulator.hpp"
#include "hzp/schedulers/step/plan_world.hpp"
#include "hzp/workloads/data/data_config.hpp"
#include "packed_simulation.hpp"
#include "results_rows.hpp"
#include "run_context.hpp"
#include "run_setup.hpp"
#include "summary.hpp"

namespace hzp::harness {
namespace {

// What the simulator cannot describe yet, refused before anything is measured: one line per field.
void refuse_undescribed(const RunSetup& s) {
  std::string bad;
  if (s.opt.backend != "cpu")
    bad += "\n  backend = " + s.opt.backend + ": the calibration runs on the CPU only so far. Fix: backend = cpu";
  if (!bad.empty()) HZP_THROW(ConfigError, "hzpbench simulate cannot describe this configuration:", bad);
}

// The weights unit u's matmuls read per token (its own and the blocks it uses; an MoE block's routed experts at
// top_k / experts of theirs: ModelSpec::active_reads), the routed experts' part in `routed`.
workloads::ModelSpec::ActiveReads unit_reads(const RunSetup& s, const workloads::ParamLayout& layout, int u) {
  workloads::ModelSpec::ActiveReads r;
  for (int b : layout.param_blocks(u)) {
    const workloads::ModelSpec::ActiveReads a = s.model->active_reads(b);
    r.total += a.total;
    r.routed += a.routed;
  }
  return r;
}

// A block's causal attention FLOPs per token (6·heads·head_dim·T, forward and backward: the kernels compute only
// visible pairs).
double block_attention_flops(const RunSetup& s, int units) {
  const workloads::FlopsPerToken f = s.model->flops_per_token();
  return (f.full_attention - f.causal_attention) / std::max(units - 2, 1);
}

// The share of each unit's compute that is attention, which ring attention overlaps its messages with: its attention
// FLOPs against them plus its matmuls' (6 per weight it reads per token). A FLOP share, not a measurement: the CPU's
// attention and GEMMs run at different rates. The simulator reads it only where a unit's ring is declared.
std::vector<double> attention_shares(const RunSetup& s) {
  const workloads::ParamLayout layout = s.model->layout();
  const int units = layout.num_units();
  const double attention = block_attention_flops(s, units);
  std::vector<double> share(static_cast<std::size_t>(units), 0.0);
  for (int u = 0; u < units; ++u)
    share[static_cast<std::size_t>(u)] = attention / (attention + 6 * unit_reads(s, layout, u).total);
  return share;
}

// The share of each unit's compute that is its routed experts' grouped GEMMs, which expert parallelism's all-to-alls
// wrap: their FLOPs per token (6 per routed weight a token reads: top_k experts) against the unit's (its attention and
// every weight it reads). A FLOP share, as attention's: the router, the gating and the rows' reordering count as the
// rest of the unit, and GEMMs of a few rows per expert run slower than the big ones on a real machine.
std::vector<double> expert_shares(const RunSetup& s) {
  const workloads::ParamLayout layout = s.model->layout();
  const int units = layout.num_units();
  const double attention = block_attention_flops(s, units);
  std::vector<double> share(static_cast<std::size_t>(units), 0.0);
  for (int u = 0; u < units; ++u) {
    const workloads::ModelSpec::ActiveReads r = unit_reads(s, layout, u);
    if (r.routed > 0) share[static_cast<std::size_t>(u)] = 6 * r.routed / (attention + 6 * r.total);
  }
  return share;
}

// Each unit's compute time and the links the steps are charged with, and where both came from.
struct Calibration {
  UnitTimes times;
  SimulatorLinks links;
  std::string source, links_how;
  double micro_batch_s = 0, peak_flops_per_s = 0;
};

// One rank of this machine runs the model at the run's shapes; the links follow from its rate exactly as a run's.
Calibration measured_calibration(const RunSetup& s, const workloads::DataSource& source, int rpn, int micro_batches) {
  // OpenBLAS threads as one rank of the target would get them on this machine (run_context.cpp): a calibration
  // with every core's threads measures another machine than the run's ranks see.
  set_compute_threads(s, s.world_size);
  const std::unique_ptr<workloads::Workload> model = s.model->build(s.train.precision);
  // The benchmark hook's sleeps as the run's step takes them (unit_sleep.hpp): both sides charge a block the same.
  const schedulers::UnitSleep sleep(s.sched);
  const ModelRate rate = measure_model_rate(*model, s.train, source, micro_batches, sleep);
  LinkPlanInput li = link_plan_input(s);
  li.given.enabled = true;  // the simulator charges the links whether or not a run would emulate them
  li.flops_per_s = rate.flops_per_s;
  li.micro_batch_s = rate.micro_batch_s;
  const LinkPlan lp = plan_links(li);
  Calibration c;
  c.times = {rate.unit_forward_s, rate.unit_backward_s, attention_shares(s), expert_shares(s), {}};
  if (sleep.block_seconds() > 0) {  // measured inside each unit's wall time; the simulator charges it apart
    const auto units = static_cast<int>(rate.unit_forward_s.size());
    for (int u = 0; u < units; ++u) c.times.after_s.push_back(sleep.of(u, units));
  }
  c.links = {lp.links, rpn, s.comm.small_message_bytes};
  c.source = "measured: each unit's forward and backward on one rank of this machine, mean of " +
             std::to_string(rate.micro_batches) + " micro-batch(es) at the run's shapes, " +
             std::to_string(openblas_get_num_threads()) + " OpenBLAS and " + std::to_string(core::intra_op_threads()) +
             " intra-op thread(s)";
  if (sleep.block_seconds() > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ", each block's forward and backward followed by the run's sleep of "
                  "scheduler.debug_unit_sleep_ms = %.6g ms (a benchmark hook)", sleep.block_seconds() * 1e3);
    c.source += buf;
  }
  c.links_how = lp.how;
  c.micro_batch_s = rate.micro_batch_s;
  c.peak_flops_per_s = rate.flops_per_s;
  return c;
}

// The cluster of links.profile: each unit's share of a micro-batch's model FLOPs (in proportion to the active parameters
// it reads: the attention term is spread like the weights) at the profile's peak times simulate.mfu, forward one
// third and backward two thirds; the profile's own bandwidths, and its cards per node unless the topology says.
Calibration profile_calibration(const RunSetup& s, int rpn) {
  const LinkProfile* p = find_link_profile(s.opt.links_profile);
  if (p == nullptr)
    HZP_THROW(ConfigError, "simulate.calibration = profile needs a cluster, and links.profile = \"", s.opt.links_profile,
              "\" names none. Fix: links.profile = h100-dgx or paper-npu");
  const workloads::ParamLayout layout = s.model->layout();
  const int units = layout.num_units();
  std::vector<double> reads(static_cast<std::size_t>(units), 0.0);
  double total = 0;
  for (int u = 0; u < units; ++u) {
    reads[static_cast<std::size_t>(u)] = unit_reads(s, layout, u).total;  // an MoE block's active weights
    total += reads[static_cast<std::size_t>(u)];
  }
  const double rate = p->peak_tflops * 1e12 * s.opt.sim_mfu;
  const double mb_flops = s.model->flops_per_token().full_attention *
                          static_cast<double>(s.train.micro_batch_size * s.model->seq_len());
  Calibration c;
  c.times.attention_share = attention_shares(s);
  c.times.expert_share = expert_shares(s);
  for (int u = 0; u < units; ++u) {
    const double t = mb_flops * reads[static_cast<std::size_t>(u)] / total / rate;
    c.times.forward_s.push_back(t / 3);
    c.times.backward_s.push_back(2 * t / 3);
  }
  coll::LinkEmulationConfig links = s.comm.links;
  links.enabled = true;
  links.intra.bandwidth_gbps = p->intra_gbps;
  links.inter.bandwidth_gbps = p->inter_gbps;
  links.intra.latency_us = p->intra_latency_us;
  links.inter.latency_us = p->inter_latency_us;
  if (rpn == 0 && s.world_size % p->cards_per_node != 0)
    HZP_THROW(ConfigError, "topology.ranks_per_node = 0 takes links.profile = ", p->name, "'s ", p->cards_per_node,
              " cards per node, which do not divide topology.world_size = ", s.world_size,
              ". Fix: set topology.ranks_per_node to a divisor of ", s.world_size, ", or a world size that is a multiple of ",
              p->cards_per_node);
  c.links = {links, rpn > 0 ? rpn : p->cards_per_node, s.comm.small_message_bytes, p->nic_per_device};
  char buf[768];
  std::snprintf(buf, sizeof buf, "profile %s: %.4g TFLOP/s x simulate.mfu %.3g, units by their active parameters' share of "
                "the model FLOPs", std::string(p->name).c_str(), p->peak_tflops, s.opt.sim_mfu);
  c.source = buf;
  char lat[384];
  std::snprintf(lat, sizeof lat, "latency intra %.3g us, inter %.3g us (%s)%s", p->intra_latency_us,
                p->inter_latency_us, std::string(p->latency_source).c_str(),
                p->nic_per_device ? ", a NIC per device" : "");
  std::snprintf(buf, sizeof buf, "profile %s as given: intra %.4g GB/s, inter %.4g GB/s per device, %d per node (%s); %s",
                std::string(p->name).c_str(), p->intra_gbps, p->inter_gbps, c.links.ranks_per_node,
                std::string(p->source).c_str(), lat);
  c.links_how = buf;
  c.micro_batch_s = mb_flops / rate;
  c.peak_flops_per_s = p->peak_tflops * 1e12;
  return c;
}

}  // namespace

Command add_simulate_command(CLI::App& app, std::vector<std::string> argv) {
  struct Args {
    RunCliArgs run;
    int micro_batches = 3;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "simulate", "Simulate one step of a run at topology.world_size ranks from a calibration on this machine");
  add_config_options(*sub, args->run.config);
  sub->add_option("--out", args->run.out, "Results file (default: output.path or results/<time>-<hash>.h5)");
  sub->add_flag("--force", args->run.force, "Overwrite an existing results file");
  sub->add_option("--calibrate", args->micro_batches, "Micro-batches timed for the calibration (after one warm-up)")
      ->default_val(3)
      ->check(CLI::PositiveNumber);
  sub->footer(
      "Example: hzpbench simulate --set model.preset=small --set topology.world_size=4 "
      "--set topology.ranks_per_node=2 --set scheduler.name=zero3 --out results/sim.h5\n");

  return {sub, [args, argv = std::move(argv)] {
            const auto w0 = resolve_run_config(args->run, 1).get_int32("topology.world_size");
            const int world = w0 > 0 ? w0 : 1;
            const ResolvedConfig cfg = resolve_run_config(args->run, world);
            const RunSetup s = plan_run(cfg, world);
            refuse_undescribed(s);
            const int rpn = cfg.get_int32("topology.ranks_per_node");  // plan_run checked it
            const std::string path = s.opt.output_path.empty() ? default_output_path(cfg, unix_seconds()) : s.opt.output_path;
            check_output_path(path, args->run.force);

            const std::unique_ptr<workloads::DataSource> source = workloads::make_data_source(s.data);
            const Calibration cal = s.opt.sim_calibration == "profile" ? profile_calibration(s, rpn)
                                                                       : measured_calibration(s, *source, rpn, args->micro_batches);
            const SimulatorLinks& sl = cal.links;

            // ---- every rank's step
            const workloads::ParamLayout layout = s.model->layout();
            const Stopwatch sim_clock;
            std::vector<RankSample> samples(static_cast<std::size_t>(world));
            schedulers::PlanInputs inputs = plan_inputs_from(cfg, *s.model, layout, 0);
            inputs.ranks_per_node = sl.ranks_per_node;  // a profile's cards per node when the topology names none
            // The world's mesh and groups, built once for all the ranks described (plan_world.hpp).
            schedulers::PlanWorld plan_world(world, inputs.ranks_per_node);
            inputs.world = &plan_world;
            auto describe = [&](int r) {
              schedulers::PlanInputs in = inputs;
              in.rank = r;
              return schedulers::describe_step(s.opt.scheduler, in);
            };
            // Document packing: the ranks compute differently, so each is simulated with every rank its collectives
            // couple, each with its own attention (packed_simulation.hpp), and none is folded into another (ranks of
            // one role share its description); without it, one pipeline group at a time, ranks of one role simulated
            // once (step_fold.hpp).
            WorldStats stats;
            JoinSets packed;
            std::vector<SimulatedStep> steps;
            if (s.data.packing.enabled()) {
              UnitTimes times = cal.times;
              times.attention_share = block_attention_shares(layout, times.attention_share);
              packed = simulate_packed(s, inputs.options, world, describe, times, sl);
              steps = packed.steps;
              stats.ranks_simulated = world;
              stats.roles = packed.roles;
            } else {
              steps = simulate_world(world, describe, cal.times, sl, s.opt.sim_fold, &stats);
            }
            for (int r = 0; r < world; ++r) {
              const SimulatedStep& st = steps[static_cast<std::size_t>(r)];
              RankSample& x = samples[static_cast<std::size_t>(r)];
              x[RankField::step_time_s] = st.step_s;
              x[RankField::cpu_time_s] = st.compute_s;
              x[RankField::compute_s] = st.compute_s;
              x[RankField::forward_s] = st.forward_s;
              x[RankField::backward_s] = st.backward_s;
              x[RankField::exposed_comm_s] = st.exposed_comm_s;
              x[RankField::join_wait_s] = st.join_wait_s;  // a peer stage late to a collective over stages
              x[RankField::transfer_wait_s] = st.exposed_comm_s - st.join_wait_s;
              x[RankField::pipeline_wait_s] = st.pipeline_wait_s;  // the bubble: compute idle on its peer stages
              x[RankField::comm_time_s] = st.comm_time_s;
              x[StepField::tokens] = static_cast<double>(s.train.global_batch * s.model->seq_len());
              x[StepField::loss] = std::nan("");
              x[StepField::grad_norm] = std::nan("");
              x[StepField::lr] = std::nan("");
              x[StepField::clip_coefficient] = std::nan("");
              for (int op = 0; op < coll::kNumCollOps; ++op)
                for (int lv = 0; lv < coll::kNumLinkLevels; ++lv) {
                  const auto o = static_cast<coll::CollOp>(op);
                  const auto l = static_cast<coll::LinkLevel>(lv);
                  x.comm(o, l, 0) = static_cast<double>(st.count[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)]);
                  x.comm(o, l, 1) = static_cast<double>(st.bytes[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)]);
                  x.comm(o, l, 2) = st.time_s[static_cast<std::size_t>(op)][static_cast<std::size_t>(lv)];
                }
            }
            const double sim_s = sim_clock.wall();

            StepScale scale;
            scale.world_size = world;
            const workloads::FlopsPerToken f = s.model->flops_per_token();
            scale.flops_per_token_full = f.full_attention;
            scale.flops_per_token_causal = f.causal_attention;
            scale.active_only = f.active_only;
            scale.peak_flops_per_rank = s.opt.peak_tflops > 0 ? s.opt.peak_tflops * 1e12 : cal.peak_flops_per_s;
            const StepRecord rec = aggregate_step(0, samples, scale);

            // ---- the results file
            RunInfo info;
            info.argv = argv;
            info.config_toml = cfg.to_toml(true);
            info.world_size = world;
            const int nodes_of = sl.ranks_per_node > 0 ? sl.ranks_per_node : world;
            info.topology = coll::Topology::virtual_nodes(world, nodes_of, 0).describe();
            info.backend = s.opt.backend;
            for (const auto& [k, v] : source->provenance()) info.data.emplace_back(k, v);
            for (const auto& [k, v] : s.data.packing.provenance()) info.data.emplace_back(k, v);
            ResultsWriter w = ResultsWriter::create(path, info, args->run.force);
            const std::vector<std::pair<std::string, AttrValue>> attrs = {
                {"simulated", std::int64_t{1}},
                {"simulate.ranks", std::int64_t{world}},
                {"simulate.ranks_per_node", std::int64_t{sl.ranks_per_node}},
                {"simulate.wall_s", sim_s},
                {"calibration.source", cal.source},
                {"calibration.micro_batch_s", cal.micro_batch_s},
                {"scheduler", s.opt.scheduler},
                {"model.description", s.model->describe()},
                {"model.num_params", s.model->num_params()},
                {"model.flops_per_token", scale.flops_per_token_full},
                {"device.peak_flops_per_rank", scale.peak_flops_per_rank},
                {"links.how", cal.links_how},
                {"links.intra_bandwidth_gbps", sl.links.intra.bandwidth_gbps},
                {"links.inter_bandwidth_gbps", sl.links.inter.bandwidth_gbps},
                {"links.intra_latency_us", sl.links.intra.latency_us},
                {"links.inter_latency_us", sl.links.inter.latency_us},
                {"warmup_steps", std::int64_t{0}}};
            for (const auto& [k, v] : attrs) w.set_attribute(k, v);
            if (packed.sets > 0) {  // the ranks simulated together under document packing
              w.set_attribute("simulate.join_sets", std::int64_t{packed.sets});
              w.set_attribute("simulate.largest_join_set", std::int64_t{packed.largest});
            }
            ResultsRows rows(world, false);
            rows.append(w, rec, samples);
            w.finish(RunStatus::ok());

            const double pipeline_frac =
                rec.step_time_s > 0 ? rec.mean[static_cast<std::size_t>(RankField::pipeline_wait_s)] / rec.step_time_s : 0;
            std::printf("simulated %s at W = %d (%d per node): step %.4g s, exposed communication %.1f%% and pipeline "
                        "wait %.1f%% of it (mean over ranks), compute "
                        "%.4g s per rank; calibration %.4g s per micro-batch; links %s; %d ranks simulated in %.3g s (%d roles)\n"
                        "results: %s\n",
                        s.opt.scheduler.c_str(), world, nodes_of, rec.step_time_s, 100.0 * rec.exposed_comm_frac,
                        100.0 * pipeline_frac,
                        samples[0][RankField::compute_s], cal.micro_batch_s, cal.links_how.c_str(), world, sim_s, stats.roles,
                        path.c_str());
            return 0;
          }};
}

}  // namespace hzp::harness
