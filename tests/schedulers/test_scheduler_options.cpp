// The scheduler.* enumeration keys (scheduler_options.cpp) against names written out here: every name the
// option parser accepts lands as its value in SchedulerOptions and reads back as the same name through the
// enum's to_string (tied_split_name, to_string(PipelineScheduleKind)); `list` offers exactly these names in
// this order; an unknown name is a ConfigError naming the key, the value and the allowed names.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "asynchzp/tied_rows.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/options.hpp"
#include "hzp/schedulers/scheduler_options.hpp"
#include "hzp/schedulers/step/pipeline_schedule.hpp"

namespace hzp::schedulers {
namespace {

using O = SchedulerOptions;

const OptionTable& table() {
  static const OptionTable t = [] {
    OptionTable made;
    register_scheduler_options(made);
    return made;
  }();
  return t;
}

SchedulerOptions parse(const std::string& assignment) {
  ConfigResolver r(table());
  r.add_set(assignment);
  return scheduler_options_from(r.resolve());
}

std::vector<std::string> allowed(const char* key) { return table().find(key)->allowed; }

// The ConfigError message of --set key=bogus, or a failure.
std::string unknown_name_error(const std::string& key) {
  try {
    parse(key + "=bogus");
  } catch (const ConfigError& e) {
    return e.message();
  }
  ADD_FAILURE() << key << " accepted an unknown name";
  return {};
}

void expect_refusal(const std::string& key, const std::string& choices) {
  const std::string m = unknown_name_error(key);
  EXPECT_NE(m.find(key + " = bogus"), std::string::npos) << m;
  EXPECT_NE(m.find(choices), std::string::npos) << m;
}

TEST(SchedulerOptionNames, TiedSplitRoundTrips) {
  const std::vector<std::pair<std::string, O::TiedSplit>> want = {
      {"off", O::TiedSplit::off}, {"rows_alltoall", O::TiedSplit::rows_alltoall},
      {"rows_allgather", O::TiedSplit::rows_allgather}};
  EXPECT_EQ(allowed("scheduler.tied_split"), (std::vector<std::string>{"off", "rows_alltoall", "rows_allgather"}));
  for (const auto& [name, value] : want) {
    const O o = parse("scheduler.tied_split=" + name);
    EXPECT_EQ(o.tied_split, value) << name;
    EXPECT_EQ(std::string(tied_split_name(o.tied_split)), name);
  }
  expect_refusal("scheduler.tied_split", "off, rows_alltoall, rows_allgather");
}

TEST(SchedulerOptionNames, ScheduleRoundTrips) {
  const std::vector<std::pair<std::string, PipelineScheduleKind>> want = {
      {"gpipe", PipelineScheduleKind::gpipe}, {"1f1b", PipelineScheduleKind::one_f_one_b},
      {"interleaved", PipelineScheduleKind::interleaved}};
  EXPECT_EQ(allowed("scheduler.schedule"), (std::vector<std::string>{"gpipe", "1f1b", "interleaved"}));
  for (const auto& [name, value] : want) {
    const O o = parse("scheduler.schedule=" + name);
    EXPECT_EQ(o.schedule, value) << name;
    EXPECT_EQ(to_string(o.schedule), name);
  }
  expect_refusal("scheduler.schedule", "gpipe, 1f1b, interleaved");
}

// The enums without a to_string: each name lands on its value (and the default is the struct's).
TEST(SchedulerOptionNames, StepEndLaunchAndPoolFallbackReachTheirValues) {
  EXPECT_EQ(parse("scheduler.step_end=allreduce").step_end, O::StepEnd::all_reduce);
  EXPECT_EQ(parse("scheduler.step_end=reduce_scatter").step_end, O::StepEnd::reduce_scatter);
  EXPECT_EQ(allowed("scheduler.step_end"), (std::vector<std::string>{"allreduce", "reduce_scatter"}));
  EXPECT_EQ(parse("scheduler.launch=unit").launch, O::Launch::unit);
  EXPECT_EQ(parse("scheduler.launch=tensor").launch, O::Launch::tensor);
  EXPECT_EQ(allowed("scheduler.launch"), (std::vector<std::string>{"unit", "tensor"}));
  EXPECT_EQ(parse("scheduler.pool_fallback=error").pool_fallback, O::PoolFallback::error);
  EXPECT_EQ(parse("scheduler.pool_fallback=inline").pool_fallback, O::PoolFallback::inline_alloc);
  EXPECT_EQ(allowed("scheduler.pool_fallback"), (std::vector<std::string>{"error", "inline"}));
  expect_refusal("scheduler.step_end", "allreduce, reduce_scatter");
  expect_refusal("scheduler.launch", "unit, tensor");
  expect_refusal("scheduler.pool_fallback", "error, inline");
}

TEST(SchedulerOptionNames, DefaultsAreTheStructs) {
  const O d = scheduler_options_from(resolve_defaults(table()));
  const O want{};
  EXPECT_EQ(d.tied_split, want.tied_split);
  EXPECT_EQ(d.schedule, want.schedule);
  EXPECT_EQ(d.step_end, want.step_end);
  EXPECT_EQ(d.launch, want.launch);
  EXPECT_EQ(d.pool_fallback, want.pool_fallback);
  EXPECT_EQ(std::get<std::string>(table().find("scheduler.schedule")->default_value), "1f1b");
}

}  // namespace
}  // namespace hzp::schedulers
