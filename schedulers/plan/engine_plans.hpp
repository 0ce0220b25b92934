// The engines' declarations for the plan (step/engine_plan.hpp), one function per registered scheduler, each
// defined beside its engine (ddp/ddp_plan.cpp, zero/zero_plan.cpp, asynchzp/asynchzp_plan.cpp,
// none/none_plan.cpp). Private to hzp_schedulers: the registry pairs each with its factory. Each runs the
// scheduler's own configuration checks and throws ConfigError as building the scheduler would.
#pragma once

#include <memory>
#include <string_view>

#include "hzp/schedulers/step/engine_plan.hpp"
#include "hzp/schedulers/step/process_groups.hpp"

namespace hzp::schedulers {

std::unique_ptr<EnginePlan> plan_none_engine(const PlanInputs& in);
/// ddp's engine, as scheduler `name` runs it (ddp; nd without the distributed optimizer, over the tensor-parallel
/// layout in `in.layout`).
std::unique_ptr<EnginePlan> plan_ddp_engine(const PlanInputs& in, std::string_view name = "ddp");
/// zero1/2/3 (stage) and hsdp (stage 3, sharded over scheduler.group_size); nd's distributed optimizer is stage 1
/// as `name` "nd".
std::unique_ptr<EnginePlan> plan_zero_engine(const PlanInputs& in, int stage, bool hybrid, std::string_view name);
/// The group a sharded engine's norm sums over (zero_plan.cpp): every rank holding a distinct part of the model (the
/// shards × tp × stages: "distinct") under tp or pp, else the shard group itself.
PlanGroup sharded_norm_group(const PlanInputs& in, const ParallelDims& dims, const coll::RankMesh& mesh,
                             const PlanGroup& shard);
/// nd: the model's tensor-parallel collectives around ddp's or zero1's engine over its data-parallel group.
std::unique_ptr<EnginePlan> plan_nd_engine(const PlanInputs& in);
/// nd's distributed optimizer with expert pieces or tp gradient shares (nd_expert_optimizer_plan.cpp); `in.layout` is
/// the rank's pieces of its stage.
std::unique_ptr<EnginePlan> plan_expert_optimizer_engine(const PlanInputs& in);
std::unique_ptr<EnginePlan> plan_asynchzp_engine(const PlanInputs& in);

}  // namespace hzp::schedulers
