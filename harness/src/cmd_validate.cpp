// `hzpbench validate`: checks a run's configuration for a world size without MPI and without computing
// anything (docs/run.md): the same resolution and checks as `hzpbench run`, so the same messages and exit
// codes (0 valid, 2 not). topology.world_size names the world size (0 = 1 rank here).
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "failure.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "phantom_run.hpp"
#include "run_setup.hpp"

namespace hzp::harness {
namespace {

int validate(const RunCliArgs& args) {
  try {
    // The embedded default depends on the world size, which the configuration itself may name.
    const auto w0 = resolve_run_config(args, 1).get_int32("topology.world_size");
    const int world = w0 > 0 ? w0 : 1;
    const ResolvedConfig cfg = resolve_run_config(args, world);
    const RunSetup s = plan_run(cfg, world, args.dump_tensors);
    (void)phantom_spec(cfg, 1);  // as run checks it, a phantom run being one process
    const auto source = workloads::make_data_source(s.data);  // opens and checks a token file
    if (!s.opt.output_path.empty()) check_output_path(s.opt.output_path, s.opt.force);

    const workloads::BatchPlan plan(s.train.global_batch, s.train.micro_batch_size, s.dp);
    std::printf("valid for %d rank%s%s\n", world, world == 1 ? "" : "s",
                w0 == 0 ? " (topology.world_size = 0: checked for 1 rank; set it to check another world size)" : "");
    std::printf("  model      %s, %lld parameters\n", s.model->describe().c_str(),
                static_cast<long long>(s.model->num_params()));
    std::printf("  scheduler  %s%s\n", s.opt.collective_only ? "debug.collective_only" : s.opt.scheduler.c_str(),
                s.uses_world_comm ? "" : " (no communicator)");
    std::printf("  parallel   %s\n", s.dims.describe().c_str());
    std::printf("  batch      %lld sequences per step = %lld micro-batches of %lld; %lld per rank over %lld "
                "data-parallel rank%s\n",
                static_cast<long long>(s.train.global_batch), static_cast<long long>(plan.micro_batches_per_step()),
                static_cast<long long>(s.train.micro_batch_size), static_cast<long long>(plan.micro_batches_per_rank()),
                static_cast<long long>(s.dp), s.dp == 1 ? "" : "s");
    std::printf("  data       %s, vocab %lld, seq_len %lld\n", std::string(workloads::to_string(s.data.kind)).c_str(),
                static_cast<long long>(source->vocab()), static_cast<long long>(source->seq_len()));
    if (!s.uses_world_comm)
      std::printf("  links      not used: scheduler %s has no communicator\n", s.opt.scheduler.c_str());
    else
      std::printf("  links      %s%s\n", s.comm.links.enabled ? "emulated" : "not emulated",
                  s.comm.links.enabled && s.opt.links_profile != "none"
                      ? (", profile " + s.opt.links_profile + " (bandwidths set from the rate measured at start)").c_str()
                      : "");
    if (s.plan) {
      const auto& b = s.plan->state_bytes;
      std::printf("  memory     model state on rank 0: %s (param %s, grad %s, master %s, m %s, v %s)\n",
                  format_bytes(s.plan->state_total()).c_str(), format_bytes(b[0]).c_str(), format_bytes(b[1]).c_str(),
                  format_bytes(b[2]).c_str(), format_bytes(b[3]).c_str(), format_bytes(b[4]).c_str());
    }
    for (const std::string& n : s.notes) std::printf("  note       %s\n", n.c_str());
    return kExitOk;
  } catch (const Error& e) {
    const char* kind = e.code() == ErrorCode::config ? "config error: " : e.code() == ErrorCode::data ? "data error: " : "";
    throw RunExit(kExitBadInput, kind + e.message(), true);
  }
}

}  // namespace

Command add_validate_command(CLI::App& app) {
  auto args = std::make_shared<RunCliArgs>();
  CLI::App* sub = app.add_subcommand(
      "validate", "Check a run's configuration for topology.world_size ranks, without MPI (exit 0 valid, 2 not)");
  add_config_options(*sub, args->config);
  sub->add_option("--out", args->out, "Results file the run would write (checked: exists, writable)")->type_name("PATH");
  sub->add_flag("--force", args->force, "The run would overwrite an existing results file");
  sub->add_option("--dump-tensors", args->dump_tensors, "Steps the run would dump tensors at")->type_name("STEPS");
  sub->footer("Example: hzpbench validate --set model.preset=tiny --set topology.world_size=1");
  return {sub, [args] { return validate(*args); }};
}

}  // namespace hzp::harness
