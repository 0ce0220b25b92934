// The scheduler registry: one table of (name, factory), filled explicitly here rather than by static
// initialisers in each scheduler's file, which a static library would silently drop when nothing else
// references that object file. A new scheduler adds one line to kEntries (and thereby enters every test
// that loops over scheduler_names()).
#include <array>
#include <sstream>
#include <utility>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Scheduler> (*make)(const SchedulerArgs&);
};

// Registration order = the order scheduler_names() lists: the reference first.
constexpr std::array kEntries = {
    Entry{"none", &make_none_scheduler},
};

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerArgs& args) {
  for (const Entry& e : kEntries)
    if (name == e.name) return e.make(args);
  std::ostringstream known;
  for (const Entry& e : kEntries) known << (known.tellp() > 0 ? ", " : "") << e.name;
  HZP_THROW(ConfigError, "scheduler.name = \"", name, "\" is not a registered scheduler; registered: ", known.str());
}

}  // namespace hzp::schedulers
