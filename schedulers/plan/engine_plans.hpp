// The engines' declarations for the plan (step/engine_plan.hpp), one function per registered scheduler, each
// defined beside its engine (ddp/ddp_plan.cpp, zero/zero_plan.cpp, asynchzp/asynchzp_plan.cpp,
// none/none_plan.cpp). Private to hzp_schedulers: the registry pairs each with its factory. Each runs the
// scheduler's own configuration checks and throws ConfigError as building the scheduler would.
#pragma once

#include <memory>

#include "hzp/schedulers/step/engine_plan.hpp"

namespace hzp::schedulers {

std::unique_ptr<EnginePlan> plan_none_engine(const PlanInputs& in);
std::unique_ptr<EnginePlan> plan_ddp_engine(const PlanInputs& in);
/// zero1/2/3 (stage) and hsdp (stage 3, sharded over scheduler.group_size).
std::unique_ptr<EnginePlan> plan_zero_engine(const PlanInputs& in, int stage, bool hybrid);
std::unique_ptr<EnginePlan> plan_asynchzp_engine(const PlanInputs& in);

}  // namespace hzp::schedulers
