// Deadlines: a rank that joins a collective later than collectives.timeout_s makes the others throw a
// TimeoutError naming the op, group, group size, sequence number and rank, instead of hanging; the
// communicator is then unusable (later calls say why); every rank still reaches MPI_Finalize. Over
// MPI and over the shared-memory transport, there also caught mid-message. (UCX warns at finalize
// about the late MPI messages nobody received: expected here.)
#include <thread>

#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Case {
  const char* name;
  Transport transport;
  std::int64_t n;  // elements per rank
};

class MpiTimeout : public ::testing::TestWithParam<Case> {};

TEST_P(MpiTimeout, LateRankGivesTheOthersATimeoutNotAHang) {
  HZP_REQUIRE_MIN_RANKS(2);
  MpiCommConfig c = test_config();
  c.timeout_s = 1.0;
  c.small_message_bytes = 0;
  c.transport = GetParam().transport;
  // Two one-page slots: a message of 16 pages is abandoned with part of it in the ring.
  c.shm_slot_bytes = 4096;
  c.shm_slots = 2;
  auto world = make_world(c);
  auto group = world->duplicate("z3");
  ASSERT_EQ(dynamic_cast<MpiCommunicator&>(*group).transport(), GetParam().transport);
  const int p = group->size(), r = group->rank();
  // One successful call first, so the late one has sequence number 1.
  group->barrier();

  // MPI: eager-sized messages, so nothing waits on a rendezvous at finalize.
  const std::int64_t n = GetParam().n;
  Buffer in(DType::f32, n), out(DType::f32, n * p);
  std::string what;
  bool timed_out = false;
  hzp::test::run_then_barrier([&] {
    if (r == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    try {
      group->all_gather(in.cview(), out.view(), StreamRef::host());
    } catch (const TimeoutError& e) {
      timed_out = true;
      what = e.what();
    }
  });

  if (r != p - 1) {
    ASSERT_TRUE(timed_out) << "rank " << r << " did not time out";
    EXPECT_TRUE(contains(what, "all_gather")) << what;
    EXPECT_TRUE(contains(what, "group 'z3'")) << what;
    EXPECT_TRUE(contains(what, "(size " + std::to_string(p) + ")")) << what;
    EXPECT_TRUE(contains(what, "sequence number 1")) << what;
    EXPECT_TRUE(contains(what, "rank " + std::to_string(r))) << what;
    EXPECT_TRUE(contains(what, "collectives.timeout_s")) << what;
    EXPECT_TRUE(contains(what, "unusable")) << what;
    if (GetParam().transport == Transport::shm) {
      EXPECT_TRUE(contains(what, "shared memory")) << what;
    }
  } else if (timed_out) {
    // The late rank itself may time out too (its peers gave up mid-ring), or complete (at 2 ranks
    // the one round's messages had already arrived).
    EXPECT_TRUE(contains(what, "all_gather")) << what;
  }
  if (timed_out) {
    EXPECT_TRUE(dynamic_cast<MpiCommunicator&>(*group).failed());
    try {
      group->barrier();
      ADD_FAILURE() << "a failed communicator accepted another call";
    } catch (const PreconditionError& e) {
      EXPECT_TRUE(contains(e.what(), "unusable since an earlier call failed")) << e.what();
      EXPECT_TRUE(contains(e.what(), "timed out")) << e.what();
    }
  }
  // Other communicators of the same world are unaffected.
  Buffer ok_in(DType::f32, 2), ok_out(DType::f32, 2 * p);
  world->all_gather(ok_in.cview(), ok_out.view(), StreamRef::host());
}

INSTANTIATE_TEST_SUITE_P(Transports, MpiTimeout,
                         ::testing::Values(Case{"mpi", Transport::mpi, 4}, Case{"shm", Transport::shm, 4},
                                           Case{"shm_mid_message", Transport::shm, 16384}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hzp::coll::test
