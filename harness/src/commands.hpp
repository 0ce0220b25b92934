// The subcommands of `hzpbench`, one per file: cmd_<name>.cpp provides add_<name>_command(CLI::App&),
// which adds the subcommand and its options and returns what to run when it is chosen; main.cpp only
// lists them. To add one: write cmd_<name>.cpp, declare its function below, add one line to main.cpp's
// command list and the file to harness/CMakeLists.txt. Also the shared --config/--set plumbing.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "hzp/core/options.hpp"

namespace hzp::harness {

/// A registered subcommand: its CLI11 app (`app->parsed()` says whether it was chosen) and its body.
/// `run` returns the exit code and throws hzp::Error on failure; main prints the error once.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// What --config FILE and repeated --set key=value collected for one subcommand.
struct ConfigArgs {
  std::string config_file;        ///< empty = no file
  std::vector<std::string> sets;  ///< "key=value", in command-line order (the last of a key wins)

  bool given() const { return !config_file.empty() || !sets.empty(); }
  /// hzpbench_options() layered: defaults < presets < config_file < sets. Throws hzp::ConfigError with
  /// the key, the value, where it came from and the fix.
  ResolvedConfig resolve() const;
};

/// Adds --config and --set to `sub`, writing into `args`, which must outlive parsing and the run:
/// keep it in a shared_ptr that the Command's `run` captures (see cmd_list.cpp).
void add_config_options(CLI::App& sub, ConfigArgs& args);

// ---- one per cmd_<name>.cpp ------------------------------------------------------------------------
Command add_list_command(CLI::App& app);
Command add_topology_command(CLI::App& app);
Command add_collectives_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
/// `argv`: the whole command line, recorded in the results file.
Command add_run_command(CLI::App& app, std::vector<std::string> argv);
Command add_validate_command(CLI::App& app);
/// `argv`: the whole command line, recorded in the results file.
Command add_simulate_command(CLI::App& app, std::vector<std::string> argv);

}  // namespace hzp::harness
