// Link emulation: modelled times computed here from the link settings and the ring's shape, checked
// as lower bounds only (this machine may be slower than any model, never faster): two concurrent
// all-gathers on one link take at least the sum of their modelled times; a late joiner delays
// everyone's completion by the model; a 100 ms modelled wait is slept (thread CPU under 5 ms);
// results stay exact; the ranks of a node booking its interface at once never overlap on it (the bookings live in
// the node's shared segment). One wall-clock upper bound, a closed form with a stated allowance for the machine's
// scheduling: two calls between two nodes whose members join in crossed orders end within two calls' time.
#include <algorithm>
#include <random>
#include <thread>

#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

// Seconds one message of `bytes` takes on a link: latency + bytes / bandwidth.
double link_time(const LinkModel& m, double bytes) { return m.latency_us * 1e-6 + bytes / (m.bandwidth_gbps * 1e9); }

MpiCommConfig emulated(double intra_lat_us, double intra_gbps, double inter_lat_us, double inter_gbps) {
  MpiCommConfig c = test_config();
  c.small_message_bytes = 0;  // the ring, whose rounds the formulas below describe
  c.links.enabled = true;
  c.links.intra = {intra_lat_us, intra_gbps};
  c.links.inter = {inter_lat_us, inter_gbps};
  return c;
}

// Modelled time of a ring all_gather of `bytes` per rank over p node-contiguous ranks: p - 1
// rounds, each as slow as its slowest hop. With virtual nodes of 2 (p >= 4) every round has both
// an intra-node hop (even -> odd) and a node-interface hop carrying one block (odd -> next node).
double ring_all_gather_model(const MpiCommConfig& c, int p, int rpn, double bytes) {
  const bool crosses = rpn > 0 && p > rpn;
  const double hop = crosses ? std::max(link_time(c.links.intra, bytes), link_time(c.links.inter, bytes))
                             : link_time(c.links.intra, bytes);
  return (p - 1) * hop;
}

double value(int r, std::int64_t i) { return static_cast<double>((r * 3 + i) % 17 - 8); }

bool check_gather(const Buffer& out, int p, std::int64_t n) {
  for (int q = 0; q < p; ++q)
    for (std::int64_t i = 0; i < n; ++i)
      if (out.get(q * n + i) != static_cast<float>(value(q, i))) return false;
  return true;
}

class LinkEmulation : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    rpn_ = GetParam();
    if (rpn_ > 0 && (hzp::test::world_size() % rpn_ != 0 || hzp::test::world_size() <= rpn_))
      GTEST_SKIP() << "needs more than one virtual node of " << rpn_ << " ranks";
  }
  int rpn_ = 0;
};

TEST_P(LinkEmulation, TwoConcurrentAllGathersShareTheLink) {
  const MpiCommConfig c = emulated(2000, 0.001, 3000, 0.0005);
  auto world = make_world(c, rpn_);
  const int p = world->size(), r = world->rank();
  auto a = world->duplicate("a");
  auto b = world->duplicate("b");
  const std::int64_t n = 250;  // 1000 bytes: 1 ms intra, 2 ms inter at these bandwidths
  const double model = ring_all_gather_model(c, p, rpn_, n * 4.0);

  Buffer in(DType::f32, n), out_a(DType::f32, n * p), out_b(DType::f32, n * p);
  in.fill([&](std::int64_t i) { return value(r, i); });
  hzp::test::run_then_barrier([] {});
  const double my_t0 = wall_seconds();
  std::string err;
  auto gather = [&](Communicator& comm, Buffer& out) {
    try {
      comm.all_gather(in.cview(), out.view(), StreamRef::host());
    } catch (const std::exception& e) {
      err = e.what();
    }
  };
  std::thread ta([&] { gather(*a, out_a); });
  std::thread tb([&] { gather(*b, out_b); });
  ta.join();
  tb.join();
  const double end = wall_seconds();
  // Measured from the first rank's start, the bound that holds whatever a rank's own start: ranks leave the barrier
  // up to ~0.1 ms apart and a call's links are booked from its group's last join (docs/collectives.md "Link
  // emulation"). The clock is CLOCK_MONOTONIC, shared by the processes of this machine.
  double t0 = my_t0;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallreduce(&my_t0, &t0, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, &req);
  ASSERT_TRUE(hzp::test::wait_with_deadline(req, hzp::test::default_deadline_s()));
  const double elapsed = end - t0;
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_GE(elapsed, 2 * model * (1 - 1e-6)) << "one all_gather is modelled at " << model << " s";
  EXPECT_TRUE(check_gather(out_a, p, n));
  EXPECT_TRUE(check_gather(out_b, p, n));
  // The library's modelled duration of each call matches the formula above.
  for (Communicator* comm : {a.get(), b.get()}) {
    const auto recs = comm->counters().records();
    ASSERT_FALSE(recs.empty());
    EXPECT_NEAR(recs.back().modelled_s, model, 1e-6);
  }
}

TEST_P(LinkEmulation, LateJoinerDelaysEveryoneByTheModel) {
  const MpiCommConfig c = emulated(1000, 0.002, 1500, 0.001);
  auto world = make_world(c, rpn_);
  const int p = world->size(), r = world->rank();
  const std::int64_t n = 100;
  const double model = ring_all_gather_model(c, p, rpn_, n * 4.0);
  Buffer in(DType::f32, n), out(DType::f32, n * p);
  in.fill([&](std::int64_t i) { return value(r, i); });
  hzp::test::run_then_barrier([] {});
  if (r == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  double late_join = wall_seconds();  // the late rank's value is broadcast below
  world->all_gather(in.cview(), out.view(), StreamRef::host());
  const double done = wall_seconds();
  MPI_Bcast(&late_join, 1, MPI_DOUBLE, p - 1, MPI_COMM_WORLD);
  EXPECT_GE(done, late_join + model * (1 - 1e-6)) << "rank " << r << " finished " << (late_join + model - done)
                                                   << " s before the model allows";
  EXPECT_TRUE(check_gather(out, p, n));
}

TEST_P(LinkEmulation, ModelledWaitIsSleptNotSpun) {
  // About 100 ms of latency over the ring's rounds, bandwidth irrelevant.
  const int p = hzp::test::world_size();
  const MpiCommConfig c = emulated(100e3 / (p - 1), 1000, 100e3 / (p - 1), 1000);
  auto world = make_world(c, rpn_);
  const double model = ring_all_gather_model(c, p, rpn_, 4.0);
  Buffer in(DType::f32, 1), out(DType::f32, p);
  in.fill([&](std::int64_t) { return value(world->rank(), 0); });
  hzp::test::run_then_barrier([] {});
  const double cpu0 = thread_cpu_seconds(), wall0 = wall_seconds();
  world->all_gather(in.cview(), out.view(), StreamRef::host());
  const double cpu = thread_cpu_seconds() - cpu0, wall = wall_seconds() - wall0;
  EXPECT_GE(wall, model * (1 - 1e-6));
  EXPECT_LT(cpu, 0.005) << "thread CPU time during a " << model << " s modelled wait";
  EXPECT_TRUE(check_gather(out, p, 1));
  const auto recs = world->counters().records();
  ASSERT_FALSE(recs.empty());
  EXPECT_GT(recs.back().emulated_s, 0.0);
}

TEST_P(LinkEmulation, ResultsStayExact) {
  MpiCommConfig c = emulated(50, 1, 100, 0.5);
  for (std::size_t small : {std::size_t{0}, std::size_t{1} << 40}) {
    c.small_message_bytes = small;
    auto world = make_world(c, rpn_);
    const int p = world->size(), r = world->rank();
    for (std::int64_t n : {0, 7, 40}) {
      Buffer buf(DType::bf16, n);
      buf.fill([&](std::int64_t i) { return value(r, i); });
      world->all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
      for (std::int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int q = 0; q < p; ++q) s += value(q, i);
        ASSERT_EQ(buf.get(i), stored(DType::bf16, s));
      }
      Buffer in(DType::f32, n * p), part(DType::f32, n);
      in.fill([&](std::int64_t i) { return value(r, i); });
      world->reduce_scatter(in.cview(), part.view(), ReduceOp::max, StreamRef::host());
      for (std::int64_t i = 0; i < n; ++i) {
        double m = -1e9;
        for (int q = 0; q < p; ++q) m = std::max(m, value(q, r * n + i));
        ASSERT_EQ(part.get(i), m);
      }
      Buffer a2a_in(DType::f32, n * p), a2a_out(DType::f32, n * p);
      a2a_in.fill([&](std::int64_t i) { return value(r, i); });
      world->all_to_all(a2a_in.cview(), a2a_out.view(), StreamRef::host());
      for (int q = 0; q < p; ++q)
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(a2a_out.get(q * n + j), value(q, r * n + j));
      world->barrier();
    }
  }
}

TEST(LinkBookingAcrossRanks, ANodesRanksNeverOverlapOnItsInterface) {
  const int p = hzp::test::world_size(), r = hzp::test::world_rank();
  if (p % 2 != 0) GTEST_SKIP() << "needs virtual nodes of 2";
  std::vector<int> node_of(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) node_of[static_cast<std::size_t>(q)] = q / 2;
  LinkEmulationConfig links;
  links.enabled = true;
  LinkEmulator e(links, node_of, r, MPI_COMM_WORLD);
  // Times are the calls' own (from 1000 s), not the clock's: only the bookings are checked.
  constexpr int kThreads = 2, kCalls = 40;  // 2 ranks x 2 threads x 40 = 160 calls per node, fewer than a link keeps
  const double t0 = 1000, dur = 0.001;
  CollectiveModel m;
  m.nic_busy_s = m.duration_s = dur;
  hzp::test::run_then_barrier([&] {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {
        std::mt19937 rng(static_cast<unsigned>(r * kThreads + i));
        std::uniform_real_distribution<double> join(0, 0.05);
        for (int k = 0; k < kCalls; ++k) {
          const LinkReservation b = e.reserve(t0 + join(rng), m);
          e.settle(b, b.ready_s, m);
        }
      });
    for (auto& t : threads) t.join();
  });
  const auto books = e.bookings(LinkLevel::inter);  // the node's, as both of its ranks booked it
  ASSERT_EQ(books.size(), static_cast<std::size_t>(2 * kThreads * kCalls));
  double total = 0;
  for (std::size_t i = 0; i < books.size(); ++i) {
    if (i > 0) EXPECT_LE(books[i - 1].end, books[i].start + 1e-9) << "bookings " << i - 1 << " and " << i << " overlap";
    total += books[i].end - books[i].start;
  }
  EXPECT_NEAR(total, 2 * kThreads * kCalls * dur, 1e-6);
}

// Two calls between the same two nodes whose members join in crossed orders: node 1 sees call A's member first, node 0
// call B's (asynchzp pp2's tied-table copies, docs/simulate.md "Validation"). A real interface reserves nothing for
// a transfer that has not started, so each node serves the two calls one after the other from their last joins:
// closed form, the first ends at lj1 + T and the second at max(lj1 + T, lj2) + T <= max(lj) + 2T. Booking an
// interface at a member's own join instead let node 1 hold [0, T] for A while A's other member was still away, and
// node 0, having moved B behind that, found no gap for A before 2T: A ended at 3T.
TEST(LinkBookingAcrossRanks, CrossedJoinsBetweenTwoNodesEndWithinTwoCalls) {
  HZP_REQUIRE_RANKS(4);
  constexpr double kT = 0.3;                     // seconds a call holds each node's interface
  constexpr std::int64_t n = 1000;               // 4000 bytes per rank, each rank's one ring message
  const double gbps = n * 4.0 / kT / 1e9;        // so that 4000 bytes take kT
  const MpiCommConfig c = emulated(0, 1, 0, gbps);
  auto world = make_world(c, 2);                 // nodes {0, 1} and {2, 3}
  const int r = world->rank();
  auto call = world->split(r % 2, r, r % 2 == 0 ? "A" : "B");  // A = {0, 2}, B = {1, 3}: one member per node
  // Joins after a common origin: node 1 (ranks 2, 3) sees A's member first, node 0 (ranks 0, 1) B's; rank 0 joins
  // 70 ms after rank 1, long after B's transfer has completed (it needs only ranks 1 and 3).
  constexpr double kOffset[] = {0.10, 0.03, 0.0, 0.01};
  double origin = wall_seconds() + 0.05;  // CLOCK_MONOTONIC, shared by the processes of this machine
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibcast(&origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req);
  ASSERT_TRUE(hzp::test::wait_with_deadline(req, hzp::test::default_deadline_s()));
  Buffer in(DType::f32, n), out(DType::f32, 2 * n);
  in.fill([&](std::int64_t i) { return value(call->rank(), i); });
  LinkEmulator::sleep_until(origin + kOffset[r]);
  const double join = wall_seconds();
  call->all_gather(in.cview(), out.view(), StreamRef::host());
  const double end = wall_seconds();
  EXPECT_TRUE(check_gather(out, 2, n));
  const auto recs = call->counters().records();
  ASSERT_FALSE(recs.empty());
  EXPECT_NEAR(recs.back().modelled_s, kT, 1e-6);

  double mine[2] = {join, end}, all[8] = {};
  MPI_Iallgather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, MPI_COMM_WORLD, &req);
  ASSERT_TRUE(hzp::test::wait_with_deadline(req, hzp::test::default_deadline_s()));
  auto join_of = [&](int q) { return all[2 * q]; };
  auto end_of = [&](int q) { return all[2 * q + 1]; };
  const double last_join[2] = {std::max(join_of(0), join_of(2)), std::max(join_of(1), join_of(3))};  // A, B
  // The machine's scheduling: a rank woken from its modelled sleep, or joining, a little late on the loaded cores.
  constexpr double kSlack = 0.1;
  const double latest = std::max(last_join[0], last_join[1]), earliest = std::min(last_join[0], last_join[1]);
  for (int q = 0; q < 4; ++q) {
    const double lj = last_join[q % 2];
    EXPECT_GE(end_of(q), lj + kT * (1 - 1e-6)) << "rank " << q << " ended before its call's last join + T";
    EXPECT_LE(end_of(q), latest + 2 * kT + kSlack)
        << "rank " << q << " ended " << (end_of(q) - latest) / kT << " T after the calls' later last join (joins "
        << join_of(0) - origin << ", " << join_of(1) - origin << ", " << join_of(2) - origin << ", "
        << join_of(3) - origin << " s after the origin): a node's interface sat idle";
  }
  // One interface serves one call at a time: the later of a node's two calls ends 2T after the first could start.
  EXPECT_GE(std::max({end_of(0), end_of(1), end_of(2), end_of(3)}), earliest + 2 * kT * (1 - 1e-6));
}

// A message is in once its sender's modelled transfer is done; a receive posted after that finds it there (the
// simulator's rule, docs/simulate.md "The model of one rank's step"), and one posted before waits for it. Before,
// the receive started the message's time again at its own join: a pipeline stage posting its receive after the
// activation had arrived paid the message twice.
TEST(LinkBookingAcrossRanks, AReceiveEndsWhenItsMessageIsIn) {
  HZP_REQUIRE_MIN_RANKS(2);
  constexpr double kT = 0.3;        // the message's modelled time on the sender's port
  constexpr std::int64_t n = 1000;  // 4000 bytes
  const MpiCommConfig c = emulated(0, n * 4.0 / kT / 1e9, 0, 1);
  auto world = make_world(c, 0);  // one node: the intra port
  const int r = world->rank();
  double origin = wall_seconds() + 0.05;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibcast(&origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req);
  ASSERT_TRUE(hzp::test::wait_with_deadline(req, hzp::test::default_deadline_s()));
  Buffer buf(DType::f32, n);
  buf.fill([&](std::int64_t i) { return value(0, i); });
  // Message 0: the receive comes 2T after the send. Message 1: the send comes T/2 after the receive.
  constexpr double kSendAt[] = {0.0, 0.9 + kT / 2}, kRecvAt[] = {2 * kT, 0.9};
  double joins[2][2] = {}, ends[2] = {};  // [message][sender, receiver]; the receiver's ends
  for (int m = 0; m < 2; ++m) {
    if (r == 0) {
      LinkEmulator::sleep_until(origin + kSendAt[m]);
      joins[m][0] = wall_seconds();
      world->send(buf.cview(), 1, m, StreamRef::host());
    } else if (r == 1) {
      LinkEmulator::sleep_until(origin + kRecvAt[m]);
      joins[m][1] = wall_seconds();
      world->recv(buf.view(), 0, m, StreamRef::host());
      ends[m] = wall_seconds();
      EXPECT_TRUE(check_gather(buf, 1, n));
    }
  }
  double sender_joins[2] = {joins[0][0], joins[1][0]};
  MPI_Ibcast(sender_joins, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req);
  ASSERT_TRUE(hzp::test::wait_with_deadline(req, hzp::test::default_deadline_s()));
  if (r != 1) return;
  constexpr double kSlack = 0.1;  // the machine's scheduling, as above
  for (int m = 0; m < 2; ++m) {
    const double in = std::max(joins[m][1], sender_joins[m] + kT);  // closed form: when the message is there
    EXPECT_GE(ends[m], in * (1 - 1e-12)) << "message " << m << " received before the model allows";
    EXPECT_LE(ends[m], in + kSlack) << "message " << m << " received " << ends[m] - joins[m][1]
                                    << " s after the receive's join, sent " << joins[m][1] - sender_joins[m]
                                    << " s before it";
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, LinkEmulation, ::testing::Values(0, 2), [](const ::testing::TestParamInfo<int>& i) {
  return i.param == 0 ? std::string("one_machine_node") : std::string("virtual_nodes_of_2");
});

}  // namespace
}  // namespace hzp::coll::test
