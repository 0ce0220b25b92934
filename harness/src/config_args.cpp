// The --config/--set options shared by every subcommand that takes a configuration, and their
// resolution against the project's option table.
#include "commands.hpp"
#include "hzp/harness/option_keys.hpp"

namespace hzp::harness {

void add_config_options(CLI::App& sub, ConfigArgs& args) {
  sub.add_option("--config", args.config_file,
                 "TOML config file; nested tables are dotted keys ([topology] ranks_per_node = 4)")
      ->type_name("FILE");
  // One value per --set, so `--set a=1 list` cannot swallow what follows; repeat --set for more.
  sub.add_option("--set", args.sets,
                 "Override one key, e.g. --set topology.ranks_per_node=4 (repeatable; wins over "
                 "--config, which wins over presets and defaults)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

ResolvedConfig ConfigArgs::resolve() const {
  ConfigResolver resolver(hzpbench_options());
  if (!config_file.empty()) resolver.add_file(config_file);
  for (const std::string& s : sets) resolver.add_set(s);
  return resolver.resolve();
}

}  // namespace hzp::harness
