// The host-testable half of exposed communication timed on the device: split_stalls (each settled stall to the
// phase whose events bracket it, from fake stall times, against sums worked out by hand), DeviceStallClock's
// bookkeeping on the host stream (only the observing thread's waits on the observed stream are recorded, a nested
// wait once, events reused across settles), and StepMeter taking exposed communication from the device figure when
// a step says it is device-timed (the GPU's numbers themselves are checked in test_cuda_engines, CudaExposedComm).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/schedulers/step/device_stalls.hpp"
#include "metrics.hpp"

namespace hzp {
namespace {

using coll::Stall;
using coll::StallKind;
using schedulers::StallSpan;

TEST(ExposedOnDevice, SplitAssignsEachStallToTheActionThatBracketsIt) {
  // Stalls 0: before the first action; 1-2: forward; 3: between; 4: backward; 5-6: the step end.
  const std::vector<Stall> stalls = {{0.5, StallKind::at_use},   {1.0, StallKind::at_issue}, {2.0, StallKind::at_issue},
                                     {4.0, StallKind::at_use},   {8.0, StallKind::at_issue}, {16.0, StallKind::at_issue},
                                     {32.0, StallKind::at_use}};
  const std::vector<StallSpan> actions = {{1, 3, true}, {4, 5, false}};
  const schedulers::StallSplit s = schedulers::split_stalls(stalls, actions, 5);
  EXPECT_DOUBLE_EQ(s.forward, 3.0);
  EXPECT_DOUBLE_EQ(s.backward, 8.0);
  EXPECT_DOUBLE_EQ(s.between, 4.5);
  EXPECT_DOUBLE_EQ(s.step_end, 48.0);
  EXPECT_DOUBLE_EQ(s.total(), 63.5);
  EXPECT_EQ(s.at_issue, 4u);
  EXPECT_EQ(s.at_use, 3u);
}

TEST(ExposedOnDevice, SplitOfNoStallsIsZeroAndBadSpansAreRefused) {
  const std::vector<StallSpan> empty_actions = {{0, 0, true}, {0, 0, false}};
  const schedulers::StallSplit none = schedulers::split_stalls({}, empty_actions, 0);
  EXPECT_EQ(none.total(), 0.0);
  const std::vector<Stall> two = {{1.0, StallKind::at_issue}, {1.0, StallKind::at_issue}};
  const std::vector<StallSpan> reversed = {{2, 1, true}};
  EXPECT_THROW(schedulers::split_stalls(two, reversed, 2), PreconditionError);
  const std::vector<StallSpan> overlapping = {{0, 2, true}, {1, 2, false}};
  EXPECT_THROW(schedulers::split_stalls(two, overlapping, 2), PreconditionError);
  const std::vector<StallSpan> past_end = {{0, 2, true}};
  EXPECT_THROW(schedulers::split_stalls(two, past_end, 1), PreconditionError);
  EXPECT_THROW(schedulers::split_stalls(two, {}, 3), PreconditionError);
}

TEST(ExposedOnDevice, ClockRecordsOnlyTheObservingThreadsWaitsOnItsStream) {
  // Host streams are all one stream; another is told apart by its handle (never used: nothing is recorded on it).
  int handle = 0;
  const StreamRef mine = StreamRef::host(), other = StreamRef::wrap(Device::cpu(), &handle);
  coll::DeviceStallClock clock(mine);
  int ran = 0;
  auto wait = [&] { ++ran; };
  coll::time_device_wait(mine, StallKind::at_issue, wait);  // nothing observed yet
  EXPECT_EQ(clock.recorded(), 0u);
  {
    coll::DeviceWaitScope observe(&clock);
    coll::time_device_wait(mine, StallKind::at_issue, wait);
    coll::time_device_wait(mine, StallKind::at_use, wait);
    coll::time_device_wait(other, StallKind::at_issue, wait);  // another stream: a lane's collective
    std::thread([&] { coll::time_device_wait(mine, StallKind::at_issue, wait); }).join();  // another thread
    // A wait inside a recorded one is already in its interval.
    coll::time_device_wait(mine, StallKind::at_use,
                           [&] { coll::time_device_wait(mine, StallKind::at_issue, wait); });
  }
  coll::time_device_wait(mine, StallKind::at_issue, wait);  // the scope ended
  EXPECT_EQ(ran, 7);
  EXPECT_EQ(coll::observed_device_waits(), nullptr);
  const std::vector<Stall> stalls = clock.settle();
  ASSERT_EQ(stalls.size(), 3u);
  EXPECT_EQ(stalls[0].kind, StallKind::at_issue);
  EXPECT_EQ(stalls[1].kind, StallKind::at_use);
  EXPECT_EQ(stalls[2].kind, StallKind::at_use);
  for (const Stall& s : stalls) EXPECT_GE(s.seconds, 0.0);
  EXPECT_EQ(clock.recorded(), 0u);
  // The events are reused: a second step records afresh, with its own kinds.
  {
    coll::DeviceWaitScope observe(&clock);
    coll::time_device_wait(mine, StallKind::at_issue, wait);
  }
  const std::vector<Stall> again = clock.settle();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, StallKind::at_issue);
}

// A wait that fails to enqueue (a collective refused, a stand-in that throws) leaves no stall behind: the mark it
// took is given back, so the next settle() neither reads an event that was never recorded after it (an error) nor,
// with a reused mark, a stale interval from an earlier step (a wrong exposed figure). The step driver's phase
// positions (recorded()) stay those of the stalls that exist.
TEST(ExposedOnDevice, ClockGivesBackTheMarkOfAWaitThatThrew) {
  const StreamRef mine = StreamRef::host();
  coll::DeviceStallClock clock(mine);
  auto wait = [] {};
  auto fail = [] { throw PreconditionError("refused"); };
  {
    coll::DeviceWaitScope observe(&clock);
    EXPECT_THROW(coll::time_device_wait(mine, StallKind::at_issue, fail), PreconditionError);
    EXPECT_EQ(clock.recorded(), 0u);
    coll::time_device_wait(mine, StallKind::at_use, wait);
    EXPECT_EQ(clock.recorded(), 1u);
    // A nested wait that throws gives back the outer mark too: the outer wait did not complete either.
    EXPECT_THROW(coll::time_device_wait(mine, StallKind::at_issue,
                                        [&] { coll::time_device_wait(mine, StallKind::at_issue, fail); }),
                 PreconditionError);
    EXPECT_EQ(clock.recorded(), 1u);
  }
  const std::vector<Stall> stalls = clock.settle();
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].kind, StallKind::at_use);
  EXPECT_GE(stalls[0].seconds, 0.0);
  // The next step reuses the marks: a failed wait there must not resurrect the first step's interval.
  {
    coll::DeviceWaitScope observe(&clock);
    EXPECT_THROW(coll::time_device_wait(mine, StallKind::at_issue, fail), PreconditionError);
  }
  EXPECT_TRUE(clock.settle().empty());
}

TEST(ExposedOnDevice, StepMeterTakesExposedCommunicationFromTheDeviceFigure) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  coll::CommCounters counters;
  harness::StepMeter meter(alloc, &counters, nullptr);
  schedulers::StepStats st;
  st.device_timed = true;
  st.forward_seconds = 0.25;
  st.backward_seconds = 0.5;
  st.optimizer_seconds = 0.125;
  meter.begin();
  const harness::RankSample host = meter.end(st);
  EXPECT_EQ(host[harness::RankField::exposed_comm_s], 0.0);  // no device figure: the counters' (none here)
  st.device_comm_timed = true;
  st.device_comm_wait_seconds = 0.0625;
  meter.begin();
  const harness::RankSample dev = meter.end(st);
  EXPECT_EQ(dev[harness::RankField::exposed_comm_s], 0.0625);
  EXPECT_EQ(dev[harness::RankField::transfer_wait_s], 0.0625);
  EXPECT_EQ(dev[harness::RankField::join_wait_s], 0.0);
  EXPECT_EQ(dev[harness::RankField::compute_s], 0.75);
  // The closure still adds up: other is what the parts leave of the step's wall time.
  EXPECT_DOUBLE_EQ(dev[harness::RankField::other_s],
                   dev[harness::RankField::step_time_s] - 0.75 - 0.0625 - 0.125);
}

}  // namespace
}  // namespace hzp
