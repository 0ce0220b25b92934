// The scheduler registry: one table of (name, factory), filled explicitly here rather than by static
// initialisers in each scheduler's file, which a static library would silently drop when nothing else
// references that object file. A new scheduler adds one line to kEntries (and thereby enters every test
// that loops over scheduler_names()).
#include <array>
#include <sstream>
#include <utility>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/asynchzp.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Scheduler> (*make)(const SchedulerArgs&);
  std::unique_ptr<EnginePlan> (*plan)(const PlanInputs&);  ///< its engine's declaration (plan/engine_plans.hpp)
  /// The ranks its model state is sharded over (the rest replicate): the mesh's dp_shard degree.
  int (*shard)(const SchedulerOptions&, int world_size);
};

int shard_replicated(const SchedulerOptions&, int) { return 1; }
int shard_world(const SchedulerOptions&, int w) { return w; }
int shard_group(const SchedulerOptions& o, int w) { return o.group_size > 0 ? o.group_size : w; }
int shard_z1(const SchedulerOptions& o, int w) { return o.z1 > 0 ? o.z1 : w; }

std::unique_ptr<EnginePlan> plan_zero1(const PlanInputs& in) { return plan_zero_engine(in, 1, false); }
std::unique_ptr<EnginePlan> plan_zero2(const PlanInputs& in) { return plan_zero_engine(in, 2, false); }
std::unique_ptr<EnginePlan> plan_zero3(const PlanInputs& in) { return plan_zero_engine(in, 3, false); }
std::unique_ptr<EnginePlan> plan_hsdp(const PlanInputs& in) { return plan_zero_engine(in, 3, true); }

// Registration order = the order scheduler_names() lists: the reference first. Every entry has a factory
// and its engine's plan declaration, so a new scheduler cannot enter the parity matrix without entering the plan tests too.
constexpr std::array kEntries = {
    Entry{"none", &make_none_scheduler, &plan_none_engine, &shard_replicated},
    Entry{"ddp", &make_ddp_scheduler, &plan_ddp_engine, &shard_replicated},
    Entry{"zero1", &make_zero1_scheduler, &plan_zero1, &shard_world},
    Entry{"zero2", &make_zero2_scheduler, &plan_zero2, &shard_world},
    Entry{"zero3", &make_zero3_scheduler, &plan_zero3, &shard_world},
    Entry{"hsdp", &make_hsdp_scheduler, &plan_hsdp, &shard_group},
    Entry{"asynchzp", &make_asynchzp_scheduler, &plan_asynchzp_engine, &shard_z1},
};

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerArgs& args) {
  if (args.stream.device().is_cuda() && name != "none")
    HZP_THROW(UnsupportedError, "scheduler ", name, " runs on the host only; a CUDA compute stream is taken by "
              "scheduler none alone (docs/cuda.md). Fix: scheduler.name = none on one rank, or backend = cpu");
  for (const Entry& e : kEntries)
    if (name == e.name) return e.make(args);
  std::ostringstream known;
  for (const Entry& e : kEntries) known << (known.tellp() > 0 ? ", " : "") << e.name;
  HZP_THROW(ConfigError, "scheduler.name = \"", name, "\" is not a registered scheduler; registered: ", known.str());
}

ParallelDims scheduler_parallel_dims(std::string_view name, const SchedulerOptions& options, int world_size) {
  for (const Entry& e : kEntries)
    if (name == e.name) return data_parallel_dims(world_size, e.shard(options, world_size));
  HZP_THROW(ConfigError, "scheduler.name = \"", name, "\" is not a registered scheduler");
}

SchedulerPlan plan_scheduler(std::string_view name, const PlanInputs& in) {
  for (const Entry& e : kEntries)
    if (name == e.name) {
      HZP_CHECK(in.layout != nullptr, "plan: a parameter layout is required");
      return plan_from_engine(e.name, in, *e.plan(in));
    }
  std::ostringstream known;
  for (const Entry& e : kEntries) known << (known.tellp() > 0 ? ", " : "") << e.name;
  HZP_THROW(ConfigError, "scheduler.name = \"", name, "\" is not a registered scheduler; registered: ", known.str());
}

}  // namespace hzp::schedulers
