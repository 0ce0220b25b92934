// Results of every MpiCommunicator collective, checked bitwise against values computed here:
// fp32 and bf16 (and int64 sums), sizes not divisible by the group and zero, sub-communicators from split, both
// algorithm families (ring forced with small_message_bytes = 0, latency-optimal forced with a huge
// threshold), each over both transports of intra-machine hops (shared memory, the default here, and
// MPI), and MPICH's native collectives. Inputs are small integers, so every sum is exact in any order
// and bf16 results are single roundings of exact sums.
#include <atomic>
#include <thread>

#include "hzp/collectives/comm_wait_observer.hpp"

#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

struct Mode {
  const char* name;
  std::size_t small_message_bytes;
  bool native;
  Transport transport;
};

class MpiCollectives : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    MpiCommConfig c = test_config();
    c.small_message_bytes = GetParam().small_message_bytes;
    c.mpi_native = GetParam().native;
    c.transport = GetParam().transport;
    world_ = make_world(c);
    // All ranks of a test run on one machine: auto and shm must give the shared-memory path.
    const Transport want = GetParam().native || GetParam().transport == Transport::mpi ? Transport::mpi : Transport::shm;
    if (world_->size() > 1) {
      ASSERT_EQ(world_->transport(), want);
    }
    p_ = world_->size();
    r_ = world_->rank();
  }
  std::unique_ptr<MpiCommunicator> world_;
  int p_ = 0, r_ = 0;
};

const DType kTypes[] = {DType::f32, DType::bf16};
const std::int64_t kSizes[] = {0, 1, 5, 37};  // 37: odd, and not divisible by 2, 4 or 8

// A value unique-ish to (rank, index), exact in bf16 (|v| <= 100).
double copy_value(int r, std::int64_t i) { return static_cast<double>((r * 13 + i * 5) % 201 - 100); }
// Summands in [-5, 5]: sums over 8 ranks stay exact in bf16.
double sum_value(int r, std::int64_t i) { return static_cast<double>(((r + 1) * (i % 7 + 1)) % 11 - 5); }

TEST_P(MpiCollectives, AllGather) {
  for (DType t : kTypes) {
    for (std::int64_t n : kSizes) {
      Buffer in(t, n), out(t, n * p_);
      in.fill([&](std::int64_t i) { return copy_value(r_, i); });
      world_->all_gather(in.cview(), out.view(), StreamRef::host());
      for (int q = 0; q < p_; ++q)
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(out.get(q * n + i), stored(t, copy_value(q, i)))
              << dtype_name(t) << " n=" << n << " block " << q << " element " << i;
    }
  }
}

TEST_P(MpiCollectives, AllGatherInPlace) {
  const std::int64_t n = 7;
  Buffer out(DType::f32, n * p_);
  for (std::int64_t i = 0; i < n; ++i) out.set(r_ * n + i, static_cast<float>(copy_value(r_, i)));
  world_->all_gather(out.slice(r_ * n, n), out.view(), StreamRef::host());
  for (int q = 0; q < p_; ++q)
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out.get(q * n + i), copy_value(q, i));
}

TEST_P(MpiCollectives, ReduceScatterSumMaxMin) {
  for (DType t : kTypes) {
    for (std::int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        Buffer in(t, n * p_), out(t, n);
        in.fill([&](std::int64_t i) { return sum_value(r_, i); });
        world_->reduce_scatter(in.cview(), out.view(), op, StreamRef::host());
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t gi = r_ * n + i;
          double want = sum_value(0, gi);
          for (int q = 1; q < p_; ++q) {
            const double v = sum_value(q, gi);
            want = op == ReduceOp::sum ? want + v : op == ReduceOp::max ? std::max(want, v) : std::min(want, v);
          }
          ASSERT_EQ(out.bits(i), [&] {
            Buffer e(t, 1);
            e.set(0, static_cast<float>(want));
            return e.bits(0);
          }()) << dtype_name(t) << " " << reduce_op_name(op) << " n=" << n << " element " << i;
        }
      }
    }
  }
}

TEST_P(MpiCollectives, AllReduceSumMaxMin) {
  for (DType t : kTypes) {
    for (std::int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        Buffer buf(t, n);
        buf.fill([&](std::int64_t i) { return sum_value(r_, i); });
        world_->all_reduce(buf.view(), op, StreamRef::host());
        for (std::int64_t i = 0; i < n; ++i) {
          double want = sum_value(0, i);
          for (int q = 1; q < p_; ++q) {
            const double v = sum_value(q, i);
            want = op == ReduceOp::sum ? want + v : op == ReduceOp::max ? std::max(want, v) : std::min(want, v);
          }
          ASSERT_EQ(buf.get(i), stored(t, want)) << dtype_name(t) << " " << reduce_op_name(op) << " n=" << n;
        }
      }
    }
  }
}

// bf16: rank 0 contributes 256 (bf16 spacing 2 there), the others 1 each. Accumulated in fp32 the
// sum is exact, 256 + (p - 1), and is rounded once; rounding after every addition would lose each 1
// added to 256 (256 + 1 rounds back to 256).
TEST_P(MpiCollectives, Bf16SumsAreRoundedOnce) {
  const std::int64_t n = 19;
  auto contribution = [&](int q, std::int64_t i) { return q == 0 ? 256.0 * (1 + i % 2) : 1.0; };
  auto expected_bits = [&](std::int64_t i) {
    double exact = 0;
    for (int q = 0; q < p_; ++q) exact += contribution(q, i);
    return bf16::from_float(static_cast<float>(exact)).bits;
  };
  Buffer buf(DType::bf16, n);
  buf.fill([&](std::int64_t i) { return contribution(r_, i); });
  world_->all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(buf.bits(i), expected_bits(i)) << "element " << i;

  Buffer in(DType::bf16, n * p_), out(DType::bf16, n);
  in.fill([&](std::int64_t i) { return contribution(r_, i % n); });
  world_->reduce_scatter(in.cview(), out.view(), ReduceOp::sum, StreamRef::host());
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out.bits(i), expected_bits((r_ * n + i) % n)) << "element " << i;
}

TEST_P(MpiCollectives, AllToAll) {
  for (DType t : kTypes) {
    for (std::int64_t n : {0, 1, 6}) {  // n elements per destination
      Buffer in(t, n * p_), out(t, n * p_);
      // Element j of the block for rank q: value of (sender r, q, j).
      in.fill([&](std::int64_t i) { return copy_value(r_ * 7 + static_cast<int>(i / (n ? n : 1)), i % (n ? n : 1)); });
      world_->all_to_all(in.cview(), out.view(), StreamRef::host());
      for (int q = 0; q < p_; ++q)
        for (std::int64_t j = 0; j < n; ++j)
          ASSERT_EQ(out.get(q * n + j), stored(t, copy_value(q * 7 + r_, j))) << "from rank " << q << " elem " << j;
    }
  }
}

TEST_P(MpiCollectives, AllToAllv) {
  // Rank a sends count(a, b) elements to b; zero counts included.
  auto count = [](int a, int b) { return static_cast<std::int64_t>((a * 2 + b) % 4); };
  std::vector<std::int64_t> sc(static_cast<std::size_t>(p_)), rc(static_cast<std::size_t>(p_));
  std::int64_t ns = 0, nr = 0;
  for (int q = 0; q < p_; ++q) {
    sc[q] = count(r_, q);
    rc[q] = count(q, r_);
    ns += sc[q];
    nr += rc[q];
  }
  for (DType t : kTypes) {
    Buffer in(t, ns), out(t, nr);
    std::int64_t k = 0;
    for (int q = 0; q < p_; ++q)
      for (std::int64_t j = 0; j < sc[q]; ++j) in.set(k++, static_cast<float>(copy_value(r_ * 8 + q, j)));
    world_->start_all_to_allv(in.cview(), sc, out.view(), rc, StreamRef::host()).wait();
    k = 0;
    for (int q = 0; q < p_; ++q)
      for (std::int64_t j = 0; j < rc[q]; ++j)
        ASSERT_EQ(out.get(k++), stored(t, copy_value(q * 8 + r_, j))) << "from rank " << q;
  }
}

TEST_P(MpiCollectives, BroadcastFromEveryRoot) {
  for (DType t : kTypes) {
    for (std::int64_t n : {0, 1, 13}) {
      for (int root = 0; root < p_; ++root) {
        Buffer buf(t, n);
        buf.fill([&](std::int64_t i) { return r_ == root ? copy_value(root, i) : -1.0; });
        world_->broadcast(buf.view(), root, StreamRef::host());
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(buf.get(i), stored(t, copy_value(root, i))) << "root " << root;
      }
    }
  }
}

TEST_P(MpiCollectives, SendRecvAroundTheRing) {
  HZP_REQUIRE_MIN_RANKS(2);
  const std::int64_t n = 11;
  Buffer out(DType::f32, n), in(DType::f32, n);
  out.fill([&](std::int64_t i) { return copy_value(r_, i); });
  Request rr = world_->start_recv(in.view(), (r_ + p_ - 1) % p_, 7, StreamRef::host());
  Request sr = world_->start_send(out.cview(), (r_ + 1) % p_, 7, StreamRef::host());
  sr.wait();
  rr.wait();
  const int from = (r_ + p_ - 1) % p_;
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(in.get(i), copy_value(from, i));
}

TEST_P(MpiCollectives, BarrierWaitsForTheLastRank) {
  // The last rank arrives 30 ms late; nobody may leave the barrier before it arrived.
  if (r_ == p_ - 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  double arrived = wall_seconds();
  world_->barrier();
  const double left = wall_seconds();
  MPI_Bcast(&arrived, 1, MPI_DOUBLE, p_ - 1, MPI_COMM_WORLD);
  EXPECT_GE(left, arrived);
}

TEST_P(MpiCollectives, ObservedThreadsShowTheirCommunicationWaits) {
  // The watchdog's evidence that a rank waits for its peers (comm_wait_observer.hpp): while rank 0 waits
  // in a barrier for the last rank (100 ms late), its observed counter is raised, and lowered after.
  std::atomic<int> waiting{0};
  observe_comm_waits(&waiting);
  std::atomic<bool> seen{false}, stop{false};
  std::thread watcher([&] {
    while (!stop.load()) {
      if (waiting.load() > 0) seen = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  if (r_ == p_ - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  world_->barrier();
  stop = true;
  watcher.join();
  observe_comm_waits(nullptr);
  EXPECT_EQ(waiting.load(), 0);
  if (r_ == 0 && p_ > 1) {
    EXPECT_TRUE(seen.load()) << "rank 0 waited ~100 ms in the barrier unobserved";
  }
  // Not observed any more: another wait leaves the counter alone.
  if (r_ == p_ - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  world_->barrier();
  EXPECT_EQ(waiting.load(), 0);
}

TEST_P(MpiCollectives, OverlappingNonblockingCallsOnOneCommunicator) {
  // Several calls in flight at once on one communicator must not match each other's messages.
  const std::int64_t n = 9;
  Buffer a(DType::f32, n), b(DType::f32, n * p_), c(DType::bf16, n);
  a.fill([&](std::int64_t i) { return sum_value(r_, i); });
  Buffer g(DType::f32, n);
  g.fill([&](std::int64_t i) { return copy_value(r_, i); });
  c.fill([&](std::int64_t i) { return sum_value(r_, i); });
  Request ra = world_->start_all_reduce(a.view(), ReduceOp::sum, StreamRef::host());
  Request rb = world_->start_all_gather(g.cview(), b.view(), StreamRef::host());
  Request rc = world_->start_all_reduce(c.view(), ReduceOp::max, StreamRef::host());
  while (!(rc.test() & rb.test() & ra.test())) {
  }
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0, m = -1e9;
    for (int q = 0; q < p_; ++q) {
      s += sum_value(q, i);
      m = std::max(m, sum_value(q, i));
    }
    ASSERT_EQ(a.get(i), s);
    ASSERT_EQ(c.get(i), stored(DType::bf16, m));
    for (int q = 0; q < p_; ++q) ASSERT_EQ(b.get(q * n + i), copy_value(q, i));
  }
}

TEST_P(MpiCollectives, SplitKeepsOrderAndWorldRanks) {
  HZP_REQUIRE_MIN_RANKS(2);
  // Two groups by parity, ordered by descending world rank (key = -rank).
  auto sub = world_->split(r_ % 2, -r_, "parity");
  ASSERT_NE(sub, nullptr);
  auto* mpi_sub = dynamic_cast<MpiCommunicator*>(sub.get());
  ASSERT_NE(mpi_sub, nullptr);
  std::vector<int> members;
  for (int q = p_ - 1; q >= 0; --q)
    if (q % 2 == r_ % 2) members.push_back(q);
  ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
  for (int i = 0; i < sub->size(); ++i) EXPECT_EQ(mpi_sub->world_rank_of(i), members[i]);
  EXPECT_EQ(mpi_sub->world_rank_of(sub->rank()), r_);
  EXPECT_EQ(sub->name(), "parity");

  for (DType t : kTypes) {
    Buffer buf(t, 5);
    buf.fill([&](std::int64_t i) { return sum_value(r_, i); });
    sub->all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
    for (std::int64_t i = 0; i < 5; ++i) {
      double s = 0;
      for (int q : members) s += sum_value(q, i);
      ASSERT_EQ(buf.get(i), stored(t, s));
    }
    Buffer in(t, 3), out(t, 3 * sub->size());
    in.fill([&](std::int64_t i) { return copy_value(r_, i); });
    sub->all_gather(in.cview(), out.view(), StreamRef::host());
    for (int i = 0; i < sub->size(); ++i)
      for (std::int64_t j = 0; j < 3; ++j) ASSERT_EQ(out.get(i * 3 + j), stored(t, copy_value(members[i], j)));
  }
  // A sub-communicator of a sub-communicator, and a rank that opts out (colour < 0).
  auto sub2 = sub->split(sub->rank() == 0 ? -1 : 0, sub->rank(), "parity-rest");
  if (sub->rank() == 0) {
    EXPECT_EQ(sub2, nullptr);
  } else {
    ASSERT_NE(sub2, nullptr);
    EXPECT_EQ(sub2->size(), sub->size() - 1);
    sub2->barrier();
  }
}

TEST_P(MpiCollectives, DuplicateIsIndependent) {
  auto dup = world_->duplicate("dup");
  Buffer buf(DType::f32, 4);
  buf.fill([&](std::int64_t i) { return sum_value(r_, i); });
  // Interleave calls on the two communicators in opposite orders of completion.
  Buffer buf2(DType::f32, 4);
  buf2.fill([&](std::int64_t i) { return sum_value(r_, i); });
  Request a = world_->start_all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
  Request b = dup->start_all_reduce(buf2.view(), ReduceOp::sum, StreamRef::host());
  b.wait();
  a.wait();
  for (std::int64_t i = 0; i < 4; ++i) {
    double s = 0;
    for (int q = 0; q < p_; ++q) s += sum_value(q, i);
    ASSERT_EQ(buf.get(i), s);
    ASSERT_EQ(buf2.get(i), s);
  }
}

TEST_P(MpiCollectives, ScratchIsReusedAcrossCalls) {
  // bf16 reductions need fp32 partials; after the first calls of each shape the pool stops growing.
  const std::int64_t n = 33;
  auto round = [&] {
    Buffer in(DType::bf16, n * p_), out(DType::bf16, n), buf(DType::bf16, n * p_);
    world_->reduce_scatter(in.cview(), out.view(), ReduceOp::sum, StreamRef::host());
    Request a = world_->start_all_reduce(buf.view(), ReduceOp::sum, StreamRef::host());
    Request b = world_->start_all_reduce(out.view(), ReduceOp::max, StreamRef::host());  // two leases at once
    a.wait();
    b.wait();
  };
  round();
  const std::size_t after_first = world_->scratch_bytes();
  for (int i = 0; i < 5; ++i) round();
  EXPECT_EQ(world_->scratch_bytes(), after_first);
}

// int64 sums (deterministic mode's fixed-point gradients): summands near 2^59 that differ in their lowest
// bits, which any floating-point path would lose, must come out as the exact integer sum.
std::int64_t int64_value(int r, std::int64_t i) {
  const std::int64_t big = (std::int64_t{1} << 59) / 8;
  return ((r + i) % 2 == 0 ? big : -big) + r * 1000003 + i * 7 + 1;
}

TEST_P(MpiCollectives, Int64SumsAreExact) {
  for (std::int64_t n : kSizes) {
    std::vector<std::int64_t> buf(static_cast<std::size_t>(n) + 1), in(static_cast<std::size_t>(n * p_) + 1),
        out(static_cast<std::size_t>(n) + 1);
    for (std::int64_t i = 0; i < n; ++i) buf[i] = int64_value(r_, i);
    for (std::int64_t i = 0; i < n * p_; ++i) in[i] = int64_value(r_, i);
    world_->all_reduce(TensorView(buf.data(), Shape{n}, DType::i64), ReduceOp::sum, StreamRef::host());
    world_->reduce_scatter(ConstTensorView(in.data(), Shape{n * p_}, DType::i64), TensorView(out.data(), Shape{n}, DType::i64),
                           ReduceOp::sum, StreamRef::host());
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t want_ar = 0, want_rs = 0;
      for (int q = 0; q < p_; ++q) {
        want_ar += int64_value(q, i);
        want_rs += int64_value(q, r_ * n + i);
      }
      ASSERT_EQ(buf[i], want_ar) << "all_reduce n=" << n << " element " << i;
      ASSERT_EQ(out[i], want_rs) << "reduce_scatter n=" << n << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MpiCollectives,
                         ::testing::Values(Mode{"ring", 0, false, Transport::automatic},
                                           Mode{"small", std::size_t{1} << 40, false, Transport::automatic},
                                           Mode{"ring_mpi", 0, false, Transport::mpi},
                                           Mode{"small_mpi", std::size_t{1} << 40, false, Transport::mpi},
                                           Mode{"native", 65536, true, Transport::automatic}),
                         [](const ::testing::TestParamInfo<Mode>& info) { return std::string(info.param.name); });

TEST(MpiCommConfig, RejectsImpossibleSettingsNamingTheKey) {
  MpiCommConfig c;
  c.timeout_s = 0;
  try {
    c.validate();
    FAIL() << "timeout_s = 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("collectives.timeout_s"), std::string::npos) << e.what();
  }
  c = MpiCommConfig{};
  c.links.inter.bandwidth_gbps = 0;
  try {
    c.validate();
    FAIL() << "bandwidth 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("links.inter.bandwidth_gbps"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_wait_policy("backoff"), WaitPolicy::backoff);
  EXPECT_FALSE(parse_wait_policy("spin").has_value());
  // The shared-memory transport: MPICH's own collectives bring their own; slots hold whole pages.
  auto rejects = [](const MpiCommConfig& bad, const char* key) {
    try {
      bad.validate();
      ADD_FAILURE() << key << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  c = MpiCommConfig{};
  c.transport = Transport::shm;
  c.mpi_native = true;
  rejects(c, "collectives.mpi_native");
  c = MpiCommConfig{};
  c.shm_slot_bytes = 5000;
  rejects(c, "collectives.shm_slot_bytes");
  c = MpiCommConfig{};
  c.shm_slots = 1;
  rejects(c, "collectives.shm_slots");
  EXPECT_EQ(parse_transport("auto"), Transport::automatic);
  EXPECT_EQ(parse_transport("shm"), Transport::shm);
  EXPECT_FALSE(parse_transport("xpmem").has_value());
}

TEST(MpiCommunicatorArgs, WrongSizesAreRejectedBeforeAnyMessage) {
  auto world = make_world(test_config());
  Buffer in(DType::f32, 3), out(DType::f32, 3 * world->size() + 1);
  EXPECT_THROW(world->all_gather(in.cview(), out.view(), StreamRef::host()), PreconditionError);
  // Collectives still work afterwards (the rejected call consumed no sequence number).
  Buffer ok(DType::f32, 3 * world->size());
  world->all_gather(in.cview(), ok.view(), StreamRef::host());
}

}  // namespace
}  // namespace hzp::coll::test
