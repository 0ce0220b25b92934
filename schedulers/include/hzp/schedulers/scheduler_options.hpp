// The `scheduler.*` keys, declared once. Each declaration holds the key's type, default, range and help and
// the SchedulerOptions field it fills; the default is that field's own initialiser in scheduler.hpp, so no
// value is written twice. The harness registers the declarations in its option table (so `hzpbench list`,
// docs/options.md, --set and config files see them) and reads the typed struct back through them.
#pragma once

#include <functional>
#include <vector>

#include "hzp/core/options.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

struct SchedulerOptionDecl {
  OptionSpec spec;
  /// Sets the bound field of `out` from the resolved value of spec.key.
  std::function<void(const ResolvedConfig& config, SchedulerOptions& out)> read;
};

/// Every `scheduler.*` key the schedulers read, except `scheduler.name` (the harness's choice of scheduler).
const std::vector<SchedulerOptionDecl>& scheduler_option_decls();

/// Adds every declaration's spec to `table`.
void register_scheduler_options(OptionTable& table);

/// The typed options of a configuration whose table has them registered.
SchedulerOptions scheduler_options_from(const ResolvedConfig& config);

}  // namespace hzp::schedulers
