// Typed scheduler options and plan inputs from a resolved configuration (scheduler_options.hpp).
#include "hzp/harness/scheduler_options.hpp"

#include "hzp/core/error.hpp"
#include "hzp/harness/model_options.hpp"

namespace hzp::harness {

schedulers::SchedulerOptions scheduler_options_from(const ResolvedConfig& c) {
  schedulers::SchedulerOptions o;
  o.bucket_mb = c.get_double("scheduler.bucket_mb");
  o.overlap = c.get_bool("scheduler.overlap");
  o.group_size = static_cast<int>(c.get_int("scheduler.group_size"));
  o.z1 = static_cast<int>(c.get_int("scheduler.z1"));
  o.z2 = static_cast<int>(c.get_int("scheduler.z2"));
  o.z3 = static_cast<int>(c.get_int("scheduler.z3"));
  o.step_end = c.get_string("scheduler.step_end") == "reduce_scatter" ? schedulers::SchedulerOptions::StepEnd::reduce_scatter
                                                                      : schedulers::SchedulerOptions::StepEnd::all_reduce;
  o.async = c.get_bool("scheduler.async");
  o.prefetch = static_cast<int>(c.get_int("scheduler.prefetch"));
  o.launch = c.get_string("scheduler.launch") == "tensor" ? schedulers::SchedulerOptions::Launch::tensor
                                                          : schedulers::SchedulerOptions::Launch::unit;
  o.pool_mb = c.get_double("scheduler.pool_mb");
  o.pool_fallback = c.get_string("scheduler.pool_fallback") == "inline"
                        ? schedulers::SchedulerOptions::PoolFallback::inline_alloc
                        : schedulers::SchedulerOptions::PoolFallback::error;
  return o;
}

schedulers::PlanInputs plan_inputs_from(const ResolvedConfig& c, const workloads::ParamLayout& layout, int rank) {
  schedulers::PlanInputs in;
  in.layout = &layout;
  in.train = train_config_from(c);
  in.options = scheduler_options_from(c);
  in.world_size = static_cast<int>(c.get_int("topology.world_size"));
  if (in.world_size <= 0)
    HZP_THROW(ConfigError, "topology.world_size = ", in.world_size, " means 'from MPI', but a plan is made without "
              "MPI; give the world size to plan for, e.g. --set topology.world_size=256");
  in.ranks_per_node = static_cast<int>(c.get_int("topology.ranks_per_node"));
  in.rank = rank;
  in.small_message_bytes = static_cast<std::size_t>(c.get_int("collectives.small_message_bytes"));
  return in;
}

}  // namespace hzp::harness
