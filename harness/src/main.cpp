// hzpbench: the program. Registers the subcommands (one cmd_<name>.cpp each, declared in commands.hpp),
// parses the command line and runs the chosen one; the only place that turns an exception into an exit
// code (library code throws; docs/architecture.md, Conventions).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <vector>

#include "blas_core.hpp"
#include "commands.hpp"
#include "failure.hpp"
#include "hzp/core/error.hpp"
#include "hzp/harness/version_report.hpp"

int main(int argc, char** argv) {
  namespace hh = hzp::harness;
  hh::restart_with_better_blas_core(argv);  // before anything else, MPI included (blas_core.hpp)
  CLI::App app{"hzpbench: distributed LLM training benchmark suite (ZeRO family, AsyncHZP)",
               "hzpbench"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print version, git SHA, build options and library versions");

  // Every subcommand, one line each; `--help` lists exactly these.
  const std::vector<hh::Command> commands = {
      hh::add_list_command(app),
      hh::add_topology_command(app),
      hh::add_collectives_command(app),
      hh::add_inspect_command(app),
      hh::add_plan_command(app),
      hh::add_run_command(app, std::vector<std::string>(argv, argv + argc)),
      hh::add_validate_command(app),
      hh::add_simulate_command(app, std::vector<std::string>(argv, argv + argc)),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (show_version) {
      std::cout << hh::version_report();
      return 0;
    }
    for (const hh::Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    std::cout << app.help();
    return 0;
  } catch (const hh::RunExit& e) {
    // `run`/`validate` already decided the exit code (docs/run.md); ranks other than 0 stay quiet for
    // errors every rank sees alike.
    if (e.print() && *e.what() != '\0') std::fprintf(stderr, "hzpbench: %s\n", e.what());
    return e.code();
  } catch (const hzp::ConfigError& e) {
    // A user's mistake: the message names the key, value, origin and fix; where in our code it was
    // detected would only be noise.
    std::fprintf(stderr, "hzpbench: config error: %s\n", e.message().c_str());
    return 2;
  } catch (const hzp::Error& e) {
    std::fprintf(stderr, "hzpbench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hzpbench: unexpected error: %s\n", e.what());
    return 2;
  }
}
