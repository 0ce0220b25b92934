// hzpbench: the program. Parses the command line and dispatches to subcommands; the only place
// that turns an exception into an exit code (library code throws, style.md §7).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "hzp/core/error.hpp"
#include "hzp/harness/version_report.hpp"

int main(int argc, char** argv) {
  CLI::App app{"hzpbench: distributed LLM training benchmark suite (ZeRO family, AsyncHZP, ND parallelism)",
               "hzpbench"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print version, git SHA, build options and library versions");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (show_version) {
      std::cout << hzp::harness::version_report();
      return 0;
    }
    std::cout << app.help();
    return 0;
  } catch (const hzp::Error& e) {
    std::fprintf(stderr, "hzpbench: %s\n", e.what());
    return 2;
  }
}
