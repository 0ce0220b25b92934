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
#include "hzp/schedulers/nd.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "hzp/schedulers/common/nested_groups.hpp"
#include "hzp/schedulers/common/step_support.hpp"
#include "plan/engine_plans.hpp"

namespace hzp::schedulers {

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Scheduler> (*make)(const SchedulerArgs&);
  std::unique_ptr<EnginePlan> (*plan)(const PlanInputs&);  ///< its engine's declaration (plan/engine_plans.hpp)
  /// Its parallel degrees at W ranks (for the data-parallel ones: the ranks its model state is sharded over,
  /// the mesh's dp_shard degree; the rest replicate).
  ParallelDims (*dims)(const SchedulerOptions&, int world_size);
  /// Whether it runs on a CUDA compute stream (device buffers, NCCL groups; docs/cuda.md). Every scheduler here
  /// does; a new one stays host-only until its buffers and collectives are on the stream.
  bool cuda = false;
};

ParallelDims dims_replicated(const SchedulerOptions&, int w) { return data_parallel_dims(w, 1); }
ParallelDims dims_world(const SchedulerOptions&, int w) { return data_parallel_dims(w, w); }
// A group size the world does not divide is the configuration's error, named by its key.
ParallelDims dims_sharded_over(const char* key, int group, int w) {
  if (group > 0 && w % group != 0)
    HZP_THROW(ConfigError, key, " = ", group, " does not divide the world size ", w, ". Fix: a divisor of ", w);
  return data_parallel_dims(w, group > 0 ? group : w);
}
ParallelDims dims_group(const SchedulerOptions& o, int w) { return dims_sharded_over("scheduler.group_size", o.group_size, w); }

std::unique_ptr<EnginePlan> plan_ddp(const PlanInputs& in) { return plan_ddp_engine(in, "ddp"); }
std::unique_ptr<EnginePlan> plan_zero1(const PlanInputs& in) { return plan_zero_engine(in, 1, false, "zero1"); }
std::unique_ptr<EnginePlan> plan_zero2(const PlanInputs& in) { return plan_zero_engine(in, 2, false, "zero2"); }
std::unique_ptr<EnginePlan> plan_zero3(const PlanInputs& in) { return plan_zero_engine(in, 3, false, "zero3"); }
std::unique_ptr<EnginePlan> plan_hsdp(const PlanInputs& in) { return plan_zero_engine(in, 3, true, "hsdp"); }

// Registration order = the order scheduler_names() lists: the reference first. Every entry has a factory
// and its engine's plan declaration, so a new scheduler cannot enter the parity matrix without entering the plan tests too.
constexpr std::array kEntries = {
    Entry{"none", &make_none_scheduler, &plan_none_engine, &dims_replicated, true},
    Entry{"ddp", &make_ddp_scheduler, &plan_ddp, &dims_replicated, true},
    Entry{"zero1", &make_zero1_scheduler, &plan_zero1, &dims_world, true},
    Entry{"zero2", &make_zero2_scheduler, &plan_zero2, &dims_world, true},
    Entry{"zero3", &make_zero3_scheduler, &plan_zero3, &dims_world, true},
    Entry{"hsdp", &make_hsdp_scheduler, &plan_hsdp, &dims_group, true},
    Entry{"asynchzp", &make_asynchzp_scheduler, &plan_asynchzp_engine, &asynchzp_parallel_dims, true},
    Entry{"nd", &make_nd_scheduler, &plan_nd_engine, &nd_parallel_dims, true},
};

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) names.emplace_back(e.name);
  return names;
}

std::vector<std::string> cuda_scheduler_names() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries)
    if (e.cuda) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerArgs& args) {
  if (args.stream.device().is_cuda())
    for (const Entry& e : kEntries)
      if (name == e.name && !e.cuda) {
        std::ostringstream gpu;
        for (const std::string& n : cuda_scheduler_names()) gpu << (gpu.tellp() > 0 ? ", " : "") << n;
        HZP_THROW(UnsupportedError, "scheduler ", name, " runs on the host only; a CUDA compute stream is taken by ",
                  gpu.str(), " (docs/cuda.md). Fix: one of those, or backend = cpu");
      }
  for (const Entry& e : kEntries) {
    if (name != e.name) continue;
    if (args.allocator != nullptr && args.stream.device() != args.allocator->device())
      HZP_THROW(ConfigError, "scheduler ", name, ": the compute stream is on ", to_string(args.stream.device()),
                " but the allocator hands out memory on ", to_string(args.allocator->device()),
                "; both must be on the same device");
    if (name != "none" && args.world == nullptr)
      HZP_THROW(ConfigError, "scheduler ", name, " is distributed and needs a world communicator (none was given). "
                "Fix: run it under mpiexec through hzpbench run, or use scheduler none");
    return e.make(args);
  }
  std::ostringstream known;
  for (const Entry& e : kEntries) known << (known.tellp() > 0 ? ", " : "") << e.name;
  HZP_THROW(ConfigError, "scheduler.name = \"", name, "\" is not a registered scheduler; registered: ", known.str());
}

ParallelDims scheduler_parallel_dims(std::string_view name, const SchedulerOptions& options, int world_size) {
  for (const Entry& e : kEntries)
    if (name == e.name) return e.dims(options, world_size);
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

StepDescription describe_step(std::string_view name, const PlanInputs& in) {
  for (const Entry& e : kEntries)
    if (name == e.name) {
      HZP_CHECK(in.layout != nullptr, "describe_step: a parameter layout is required");
      StepDescription d;
      d.plan = plan_from_engine(e.name, in, *e.plan(in), &d);
      return d;
    }
  return {plan_scheduler(name, in), {}, {}, {}, 0};  // plan_scheduler names the registered ones
}

}  // namespace hzp::schedulers
