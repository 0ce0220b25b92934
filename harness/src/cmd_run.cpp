// `hzpbench run`: one training run (docs/run.md). The command line only; the run itself is run_loop.cpp.
#include <memory>

#include "commands.hpp"
#include "run_loop.hpp"

namespace hzp::harness {

Command add_run_command(CLI::App& app, std::vector<std::string> argv) {
  auto args = std::make_shared<RunCliArgs>();
  CLI::App* sub = app.add_subcommand(
      "run", "Train a model with a scheduler for train.steps steps; record everything in one HDF5 results file");
  add_config_options(*sub, args->config);
  sub->add_option("--out", args->out, "Results file (output.path); default results/<UTC time>-<config hash>.h5")
      ->type_name("PATH");
  sub->add_flag("--force", args->force, "Overwrite an existing results file (output.force)");
  sub->add_option("--dump-tensors", args->dump_tensors,
                  "Write parameters, gradients and optimizer states by name into the results file after these "
                  "steps (comma-separated, counted from 0)")
      ->type_name("STEPS");
  sub->add_option("--resume", args->resume,
                  "Continue from this checkpoint (output.checkpoint_every) at its step + 1 through train.steps, into "
                  "a new results file that names it; any scheduler and world size (docs/checkpoints.md)")
      ->type_name("CKPT");
  sub->footer(
      "Without --config, an embedded default: model.preset = small on the synthetic source, the scheduler for the "
      "world size (none on one rank), links.profile = h100-dgx; --set model.preset=tiny gets tiny's own defaults.\n"
      "Run it directly for one rank, or under mpiexec -n N.\n"
      "Exit codes: 0 ok; 2 bad input (configuration, data, output path: nothing ran); 3 diverged (a NaN or "
      "infinite loss; status `diverged`); 4 failed (an error on some rank, the watchdog, or the results file: a "
      "full disk, the file replaced; status `failed: <rank>: <reason>`); 130 / 138 / 143 terminated by SIGINT / "
      "SIGUSR1 / SIGTERM (status `failed: <rank>: terminated by SIG...`, every completed step kept); 5 preempted (a "
      "signal with output.checkpoint_every on: checkpoint written after the step in flight, status `preempted: ...`).");
  return {sub, [args, argv = std::move(argv)] { return run_main(*args, argv); }};
}

}  // namespace hzp::harness
