// StreamOrderedRequests (stream_ordered_requests.hpp): on the host a request is waited for as it is settled; kept (as
// on a CUDA stream, forced here on the host stream since this machine has no device) it is held until complete(),
// where its deadline is enforced; the keeper's destructor waits for what it still holds and never throws.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll {
namespace {

// What a fake request saw: its waits, and whether its transfer has ended.
struct Seen {
  int waits = 0;
  bool finished = false;
};

// A request that ends when waited for (`ends_when_waited`), or never: then its wait enforces a deadline of
// `timeout_s` from the start of the wait, as the NCCL backend's does, and throws TimeoutError naming it.
class FakeRequest final : public Request::Impl {
 public:
  FakeRequest(Seen& seen, bool ends_when_waited, double timeout_s = 0.05)
      : seen_(seen), ends_(ends_when_waited), timeout_s_(timeout_s) {}
  bool test() override { return seen_.finished; }
  void wait() override {
    ++seen_.waits;
    const double deadline = wall_seconds() + timeout_s_;
    while (!ends_) {
      if (wall_seconds() > deadline)
        HZP_THROW(TimeoutError, "fake all_reduce #7 on 'tp' did not complete within ", timeout_s_, " s");
    }
    seen_.finished = true;
  }

 private:
  Seen& seen_;
  bool ends_;
  double timeout_s_;
};

Request fake(Seen& seen, bool ends_when_waited = true) {
  return Request(std::make_unique<FakeRequest>(seen, ends_when_waited));
}

using Completion = StreamOrderedRequests::Completion;

TEST(StreamOrderedRequests, TheHostStreamWaitsAtOnce) {
  StreamOrderedRequests keeper;  // the host stream
  EXPECT_EQ(keeper.completion(), Completion::at_once);
  Seen a;
  keeper.settle(fake(a));
  EXPECT_EQ(a.waits, 1);  // the MPI backend moves host buffers only inside the wait: before the next kernel
  EXPECT_TRUE(a.finished);
  EXPECT_EQ(keeper.kept(), 0u);
  keeper.complete();  // nothing left to do
  EXPECT_EQ(a.waits, 1);
}

TEST(StreamOrderedRequests, AKeptRequestWaitsForComplete) {
  StreamOrderedRequests keeper(StreamRef::host(), Completion::kept);
  Seen a, b;
  keeper.settle(fake(a));
  keeper.settle(fake(b));
  EXPECT_EQ(a.waits + b.waits, 0);  // started and kept: no host wait where they were issued
  EXPECT_EQ(keeper.kept(), 2u);
  keeper.complete();
  EXPECT_EQ(a.waits, 1);
  EXPECT_EQ(b.waits, 1);
  EXPECT_TRUE(a.finished && b.finished);
  EXPECT_EQ(keeper.kept(), 0u);
  keeper.complete();  // once per step: a second call finds nothing
  EXPECT_EQ(a.waits + b.waits, 2);
}

TEST(StreamOrderedRequests, TheDeadlineIsEnforcedAtCompletion) {
  StreamOrderedRequests keeper(StreamRef::host(), Completion::kept);
  Seen stuck, after;
  keeper.settle(fake(stuck, /*ends_when_waited=*/false));  // settling a request that never ends does not wait
  keeper.settle(fake(after));
  EXPECT_EQ(stuck.waits, 0);
  try {
    keeper.complete();
    FAIL() << "a request that never ends completed";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce #7 on 'tp'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(stuck.waits, 1);
  EXPECT_FALSE(stuck.finished);
  // The keeper let go of everything: the request after the failed one was still waited for (never abandoned while
  // its transfer might run), and the keeper is empty and usable for the next step.
  EXPECT_EQ(after.waits, 1);
  EXPECT_TRUE(after.finished);
  EXPECT_EQ(keeper.kept(), 0u);
  Seen next;
  keeper.settle(fake(next));
  keeper.complete();
  EXPECT_TRUE(next.finished);
}

TEST(StreamOrderedRequests, TheDestructorWaitsForWhatItStillHolds) {
  Seen a;
  {
    StreamOrderedRequests keeper(StreamRef::host(), Completion::kept);
    keeper.settle(fake(a));
    EXPECT_EQ(a.waits, 0);
  }
  EXPECT_EQ(a.waits, 1);  // waited, not dropped: its buffers could otherwise be handed out while it runs
  EXPECT_TRUE(a.finished);
}

TEST(StreamOrderedRequests, TheDestructorLogsAFailureInsteadOfThrowing) {
  Seen stuck;
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW({
    StreamOrderedRequests keeper(StreamRef::host(), Completion::kept);
    keeper.settle(fake(stuck, /*ends_when_waited=*/false));
  });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(stuck.waits, 1);
  EXPECT_NE(err.find("all_reduce #7 on 'tp'"), std::string::npos) << err;
}

TEST(StreamOrderedRequests, MovingAKeeperMovesItsRequests) {
  Seen a;
  StreamOrderedRequests from(StreamRef::host(), Completion::kept);
  from.settle(fake(a));
  StreamOrderedRequests to = std::move(from);
  EXPECT_EQ(to.kept(), 1u);
  EXPECT_EQ(a.waits, 0);
  to.complete();
  EXPECT_EQ(a.waits, 1);
}

}  // namespace
}  // namespace hzp::coll
