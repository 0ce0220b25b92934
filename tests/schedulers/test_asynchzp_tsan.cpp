// asynchzp with its background threads under ThreadSanitizer (label tsan; any report fails the test):
// async on, prefetch 2, one collective per parameter tensor, both step-end forms, 3 steps at 2 and 4
// ranks, and the losses still those of the single-rank reference (fp32, 1e-6). Deterministic mode on the same
// path: int64 blocks handed from the compute thread to the gradient thread, and a forced retry on step 0 that
// drains the queued reduce-scatters and restarts the gather schedule; losses bitwise those of `none`.
#include <gtest/gtest.h>

#include "data_parallel_test_util.hpp"

namespace hzp::test {
namespace {

using SO = schedulers::SchedulerOptions;

// asynchzp async, prefetch 2, per tensor, z1 = W, z2 = W/2, z3 = 1, on `s`'s model (deterministic when
// `policy` is given).
std::unique_ptr<schedulers::Scheduler> async_per_tensor(TinySetup& s, coll::Communicator& world, SO::StepEnd end,
                                                        const schedulers::FixedPointPolicy* policy = nullptr) {
  const int w = world_size();
  schedulers::SchedulerArgs a = s.args();
  a.world = &world;
  if (policy != nullptr) {
    a.train.deterministic = true;
    a.fixed_point = *policy;
  }
  a.options.z1 = w;
  a.options.z2 = std::max(1, w / 2);
  a.options.z3 = 1;
  a.options.async = true;
  a.options.prefetch = 2;
  a.options.launch = SO::Launch::tensor;
  a.options.step_end = end;
  return schedulers::make_scheduler("asynchzp", a);
}

TEST(AsyncHzpTsan, PerTensorPrefetchTwoThreeSteps) {
  run_then_barrier([] {
    const int w = world_size();
    TinySetup ref_setup(workloads::Precision::fp32);
    schedulers::SchedulerArgs ra = ref_setup.args();
    schedulers::NoneScheduler none(ra);
    std::vector<double> ref;
    for (std::int64_t k = 0; k < 3; ++k) ref.push_back(none.step({k, ref_setup.source.get()}).loss);

    auto world = make_world(std::max(1, w / 2));
    for (SO::StepEnd end : {SO::StepEnd::all_reduce, SO::StepEnd::reduce_scatter}) {
      SCOPED_TRACE(end == SO::StepEnd::all_reduce ? "allreduce" : "reduce_scatter");
      TinySetup s(workloads::Precision::fp32);
      auto sched = async_per_tensor(s, *world, end);
      for (std::int64_t k = 0; k < 3; ++k) EXPECT_LE(rel_diff(sched->step({k, s.source.get()}).loss, ref[k]), 1e-6) << k;
    }
  }, 600);
}

TEST(AsyncHzpTsan, DeterministicWithARetry) {
  run_then_barrier([] {
    const int w = world_size();
    // Step 0's exponent far too fine: every step-0 attempt overflows once and reruns.
    const schedulers::FixedPointPolicy policy{.step0_exponent = 80, .headroom_bits = 4, .max_retries = 3};
    TinySetup ref_setup(workloads::Precision::fp32);
    schedulers::SchedulerArgs ra = ref_setup.args();
    ra.train.deterministic = true;
    ra.fixed_point = policy;
    schedulers::NoneScheduler none(ra);
    std::vector<schedulers::StepStats> ref;
    for (std::int64_t k = 0; k < 2; ++k) ref.push_back(none.step({k, ref_setup.source.get()}));
    ASSERT_GE(ref[0].retries, 1);

    auto world = make_world(std::max(1, w / 2));
    for (SO::StepEnd end : {SO::StepEnd::all_reduce, SO::StepEnd::reduce_scatter}) {
      SCOPED_TRACE(end == SO::StepEnd::all_reduce ? "allreduce" : "reduce_scatter");
      TinySetup s(workloads::Precision::fp32);
      auto sched = async_per_tensor(s, *world, end, &policy);
      for (std::int64_t k = 0; k < 2; ++k) {
        const schedulers::StepStats st = sched->step({k, s.source.get()});
        EXPECT_EQ(st.loss, ref[k].loss) << k;
        EXPECT_EQ(st.grad_norm, ref[k].grad_norm) << k;
        EXPECT_EQ(st.retries, ref[k].retries) << k;
      }
    }
  }, 600);
}

}  // namespace
}  // namespace hzp::test
