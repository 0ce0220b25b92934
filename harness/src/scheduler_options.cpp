// Typed scheduler options and plan inputs from a resolved configuration (scheduler_options.hpp).
#include "hzp/harness/scheduler_options.hpp"

#include "hzp/core/error.hpp"
#include "hzp/harness/model_options.hpp"
#include "hzp/schedulers/scheduler_options.hpp"

namespace hzp::harness {

schedulers::SchedulerOptions scheduler_options_from(const ResolvedConfig& c) {
  return schedulers::scheduler_options_from(c);
}

schedulers::PlanInputs plan_inputs_from(const ResolvedConfig& c, const workloads::ModelSpec& model,
                                        const workloads::ParamLayout& layout, int rank) {
  schedulers::PlanInputs in;
  in.layout = &layout;
  in.model = &model;
  in.train = train_config_from(c);
  in.options = scheduler_options_from(c);
  in.world_size = c.get_int32("topology.world_size");
  if (in.world_size <= 0)
    HZP_THROW(ConfigError, "topology.world_size = ", in.world_size, " means 'from MPI', but a plan is made without "
              "MPI; give the world size to plan for, e.g. --set topology.world_size=256");
  in.ranks_per_node = c.get_int32("topology.ranks_per_node");
  in.rank = rank;
  in.small_message_bytes = static_cast<std::size_t>(c.get_int("collectives.small_message_bytes"));
  return in;
}

}  // namespace hzp::harness
