// The shared-memory transport of intra-machine hops (collectives.transport): which communicators use
// it, messages of many slot-sized chunks through tiny rings for every op (exact results, bf16 rounded
// once), messages that arrive before their receive (whole or half-way), counters of virtual nodes,
// and two duplicates used concurrently from two threads (also built with ThreadSanitizer); each way a message
// crosses: through the slots, by descriptor read with process_vm_readv, and by mapping the sender's SharedBuffer.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "hzp/collectives/shm_message_counts.hpp"
#include "mpi_comm_test_util.hpp"

namespace hzp::coll::test {
namespace {

// Exact in bf16; sums over 8 ranks stay exact too.
double copy_value(int r, std::int64_t i, int salt = 0) {
  return static_cast<double>((r * 13 + i * 5 + salt * 7) % 201 - 100);
}
double sum_value(int r, std::int64_t i, int salt = 0) {
  return static_cast<double>(((r + 1) * (i % 7 + 1) + salt) % 11 - 5);
}

// The three ways a message crosses: through the slots; by descriptor, read from the sender's buffer with
// process_vm_readv (single_copy_bytes = 1: every non-empty message); by descriptor, read from the receiver's
// mapping of the sender's SharedBuffer (every buffer of the test shared memory, mapped_buffers on).
struct Copies {
  std::size_t single_copy_bytes = 0;
  Memory memory = Memory::plain;
};
constexpr Copies kSlots{0, Memory::plain}, kSingleCopy{1, Memory::plain}, kMapped{0, Memory::shared};
std::string copies_name(const Copies& c) {
  return c.memory == Memory::shared ? "mapped" : c.single_copy_bytes == 0 ? "slots" : "single_copy";
}
// (small_message_bytes, the way messages cross): 0 picks the ring family, a huge threshold the small-message one.
std::string algorithms_name(const std::pair<std::size_t, Copies>& param) {
  return std::string(param.first == 0 ? "ring" : "small") + "_" + copies_name(param.second);
}

// Rank r's side of an exchange in which rank `from` sends count(from, to) elements to rank `to`, each rank's input
// holding copy_value(from, i, salt): its send and receive counts, and the output it must receive.
struct Exchange {
  std::vector<std::int64_t> send, recv;
  std::int64_t send_total = 0;
  std::vector<double> expected;
};
Exchange exchange(int p, int r, int salt, const std::function<std::int64_t(int, int)>& count) {
  Exchange e;
  for (int q = 0; q < p; ++q) {
    e.send.push_back(count(r, q));
    e.recv.push_back(count(q, r));
    e.send_total += count(r, q);
    std::int64_t their_off = 0;  // where rank q's block for us starts in q's input
    for (int k = 0; k < r; ++k) their_off += count(q, k);
    for (std::int64_t i = 0; i < count(q, r); ++i) e.expected.push_back(copy_value(q, their_off + i, salt));
  }
  return e;
}

// Tiny slots (one page, two per direction): every message of a few pages streams through the ring
// in many chunks, wrapping it several times; a message by descriptor is read a ring's worth (two pages) at a
// time.
MpiCommConfig tiny_rings(std::size_t small_message_bytes, const Copies& copies) {
  MpiCommConfig c = test_config();
  c.transport = Transport::shm;
  c.shm_slot_bytes = 4096;
  c.shm_slots = 2;
  c.small_message_bytes = small_message_bytes;
  c.single_copy_bytes = copies.single_copy_bytes;
  c.mapped_buffers = copies.memory == Memory::shared;
  return c;
}

class ShmChunks : public ::testing::TestWithParam<std::pair<std::size_t, Copies>> {};

TEST_P(ShmChunks, EveryOpExactThroughTinyRings) {
  const Copies copies = GetParam().second;
  const Memory mem = copies.memory;
  auto world = make_world(tiny_rings(GetParam().first, copies));
  // This machine's kernel allows the cross-process reads and mappings (the containers CI runs in do): the paths
  // are exercised.
  const bool shm = world->transport() == Transport::shm;
  EXPECT_EQ(world->single_copy_bytes(), shm ? copies.single_copy_bytes : 0);
  EXPECT_EQ(world->mapped_buffers(), shm && mem == Memory::shared);
  const int p = world->size(), r = world->rank();
  if (p > 1) {
    ASSERT_EQ(world->transport(), Transport::shm);
  }
  for (DType t : {DType::f32, DType::bf16}) {
    // Blocks of ~2.4 and ~5 pages: chunk boundaries fall inside elements' runs, never on block ends.
    for (std::int64_t n : {2500, 5003}) {
      Buffer in(t, n, mem), out(t, n * p, mem);
      in.fill([&](std::int64_t i) { return copy_value(r, i); });
      world->all_gather(in.cview(), out.view(), StreamRef::host());
      for (int q = 0; q < p; ++q)
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(out.get(q * n + i), stored(t, copy_value(q, i))) << dtype_name(t) << " n=" << n << " q=" << q;

      Buffer full(t, n * p, mem), part(t, n, mem);
      full.fill([&](std::int64_t i) { return sum_value(r, i); });
      world->reduce_scatter(full.cview(), part.view(), ReduceOp::sum, StreamRef::host());
      for (std::int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int q = 0; q < p; ++q) s += sum_value(q, r * n + i);
        ASSERT_EQ(part.get(i), stored(t, s)) << dtype_name(t) << " reduce_scatter n=" << n << " i=" << i;
      }

      Buffer acc(t, n + 3, mem);  // not divisible by the group: unequal ring chunks
      acc.fill([&](std::int64_t i) { return sum_value(r, i, 1); });
      world->all_reduce(acc.view(), ReduceOp::max, StreamRef::host());
      for (std::int64_t i = 0; i < n + 3; ++i) {
        double m = -1e9;
        for (int q = 0; q < p; ++q) m = std::max(m, sum_value(q, i, 1));
        ASSERT_EQ(acc.get(i), stored(t, m)) << dtype_name(t) << " all_reduce i=" << i;
      }
    }
  }
  // Uneven exchange: rank r sends (r + q) % 3 * 1500 + 1 elements to rank q.
  const Exchange x =
      exchange(p, r, 0, [](int from, int to) { return static_cast<std::int64_t>((from + to) % 3) * 1500 + 1; });
  const auto nr = static_cast<std::int64_t>(x.expected.size());
  Buffer a_in(DType::f32, x.send_total, mem), a_out(DType::f32, nr, mem);
  a_in.fill([&](std::int64_t i) { return copy_value(r, i); });
  world->start_all_to_allv(a_in.cview(), x.send, a_out.view(), x.recv, StreamRef::host()).wait();
  for (std::int64_t i = 0; i < nr; ++i)
    ASSERT_EQ(a_out.get(i), x.expected[static_cast<std::size_t>(i)]) << "all_to_allv, element " << i;
  Buffer b(DType::f32, 9001, mem);
  const int root = p - 1;
  b.fill([&](std::int64_t i) { return r == root ? copy_value(root, i) : 0.0; });
  world->broadcast(b.view(), root, StreamRef::host());
  for (std::int64_t i = 0; i < 9001; ++i) ASSERT_EQ(b.get(i), copy_value(root, i));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ShmChunks,
                         ::testing::Values(std::pair{std::size_t{0}, kSlots},
                                           std::pair{std::size_t{1} << 40, kSlots},
                                           std::pair{std::size_t{0}, kSingleCopy},
                                           std::pair{std::size_t{1} << 40, kSingleCopy},
                                           std::pair{std::size_t{0}, kMapped},
                                           std::pair{std::size_t{1} << 40, kMapped}),
                         [](const auto& info) { return algorithms_name(info.param); });

// A mapped message is read from the sender's pages: its send ends only once the receiver has taken it (through
// the slots this one-page message would sit in the two-slot ring and its send end at once). It starts 7 elements
// into its buffer (the descriptor's offset), and lands in private memory.
TEST(ShmTransport, MappedSendEndsOnlyOnceTheReceiverHasReadIt) {
  HZP_REQUIRE_MIN_RANKS(2);
  auto world = make_world(tiny_rings(0, kMapped));
  auto c = world->duplicate("p2p");
  ASSERT_TRUE(world->mapped_buffers());
  const int r = c->rank();
  const std::int64_t n = 1000, skip = 7;
  auto barrier = [] { hzp::test::run_then_barrier([] {}); };
  if (r == 0) {
    Buffer buf(DType::f32, skip + n, Memory::shared);
    buf.fill([&](std::int64_t i) { return copy_value(0, i); });
    Request s = c->start_send(buf.slice(skip, n), 1, 3, StreamRef::host());
    EXPECT_FALSE(s.test());  // the peer has not even posted its receive
    barrier();
    s.wait();
  } else if (r == 1) {
    barrier();
    Buffer got(DType::f32, n);
    c->recv(got.view(), 0, 3, StreamRef::host());
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got.get(i), copy_value(0, skip + i)) << i;
  } else {
    barrier();
  }
}

// One call mixing the two: all_gather's own block leaves from private memory (through the slots), the blocks it
// forwards (at 4 and 8 ranks) from the shared output (mapped); reduce_scatter's input is shared, its partials
// leave from the communicator's private scratch. Odd sizes, so blocks and chunks end mid-page.
TEST(ShmTransport, MappedAndSlotMessagesInOneCall) {
  auto world = make_world(tiny_rings(0, kMapped));
  const int p = world->size(), r = world->rank();
  for (std::int64_t n : {1, 1023, 3001}) {
    Buffer in(DType::f32, n), out(DType::f32, n * p, Memory::shared);
    in.fill([&](std::int64_t i) { return copy_value(r, i, 2); });
    world->all_gather(in.cview(), out.view(), StreamRef::host());
    for (int q = 0; q < p; ++q)
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out.get(q * n + i), copy_value(q, i, 2)) << n << " " << q;
    Buffer full(DType::bf16, n * p, Memory::shared), part(DType::bf16, n);
    full.fill([&](std::int64_t i) { return sum_value(r, i, 2); });
    world->reduce_scatter(full.cview(), part.view(), ReduceOp::sum, StreamRef::host());
    for (std::int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int q = 0; q < p; ++q) sum += sum_value(q, r * n + i, 2);
      ASSERT_EQ(part.get(i), stored(DType::bf16, sum)) << n << " " << i;
    }
  }
}

// Kept sends (Poster::send_kept) end before their receivers read them, and a call waits for those reads only at its
// end. Each rank in turn reads late: it starts the call (posting its own messages) before the others start theirs,
// then sleeps while they run ahead as far as the data lets them. Every rank overwrites all its buffers the moment a
// call returns, and starts the next reduction at once (which writes the communicator's scratch again, where the
// partials of the one before were sent from), so bytes written again too early (within the call, or after it)
// reach the late reader as garbage. Odd sizes (blocks end mid-page, inside a two-page ring), in place and not,
// every op but barrier and send/recv, in both algorithm families, every message by descriptor (read with
// process_vm_readv, or mapped); at 4 and 8 ranks again in a group of 3 or 7 (a ring of odd length, recursive
// doubling's fold-in and hand-back); and the counters show the sends did end early.
void survive_late_reader(Communicator& c, MPI_Comm same_group, Memory mem, const std::string& group) {
  const int p = c.size(), r = c.rank();
  for (int late = 0; late < p; ++late) {
    // The late rank's messages are out before anyone else's arrive, and it reads nothing for 30 ms. `next`, when
    // given, is started the moment the first call returns.
    auto run = [&](const std::function<Request()>& start, const std::function<Request()>& next = nullptr) {
      if (r == late) {
        Request q = start();
        hzp::test::run_then_barrier([] {}, hzp::test::default_deadline_s(), same_group);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        q.wait();
      } else {
        hzp::test::run_then_barrier([] {}, hzp::test::default_deadline_s(), same_group);
        start().wait();
      }
      if (next) next().wait();
    };
    auto garbage = [](Buffer& b) { b.fill([](std::int64_t) { return -77.0; }); };
    for (std::int64_t n : {1, 1023, 3001}) {
      const std::string at = " n=" + std::to_string(n) + " late=" + std::to_string(late) + " in " + group;
      Buffer in(DType::f32, n, mem), out(DType::f32, n * p, mem);
      in.fill([&](std::int64_t i) { return copy_value(r, i, 3); });
      run([&] { return c.start_all_gather(in.cview(), out.view(), StreamRef::host()); });
      garbage(in);
      for (int q = 0; q < p; ++q)
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out.get(q * n + i), copy_value(q, i, 3)) << "all_gather" << at;
      garbage(out);

      Buffer gathered(DType::f32, n * p, mem);  // in place: our block is already in out
      gathered.fill([&](std::int64_t i) { return i / n == r ? copy_value(r, i % n, 4) : -1.0; });
      run([&] { return c.start_all_gather(gathered.slice(r * n, n), gathered.view(), StreamRef::host()); });
      for (int q = 0; q < p; ++q)
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(gathered.get(q * n + i), copy_value(q, i, 4)) << "all_gather in place" << at;
      garbage(gathered);

      // Two in a row: the second's partials land in the scratch the first's were sent from.
      Buffer full(DType::bf16, n * p, mem), part(DType::bf16, n, mem);
      Buffer full2(DType::bf16, n * p, mem), part2(DType::bf16, n, mem);
      full.fill([&](std::int64_t i) { return sum_value(r, i, 3); });
      full2.fill([&](std::int64_t i) { return sum_value(r, i, 6); });
      run([&] { return c.start_reduce_scatter(full.cview(), part.view(), ReduceOp::sum, StreamRef::host()); },
          [&] {
            garbage(full);
            return c.start_reduce_scatter(full2.cview(), part2.view(), ReduceOp::sum, StreamRef::host());
          });
      garbage(full2);
      for (std::int64_t i = 0; i < n; ++i) {
        double sum = 0, sum2 = 0;
        for (int q = 0; q < p; ++q) sum += sum_value(q, r * n + i, 3), sum2 += sum_value(q, r * n + i, 6);
        ASSERT_EQ(part.get(i), stored(DType::bf16, sum)) << "reduce_scatter" << at;
        ASSERT_EQ(part2.get(i), stored(DType::bf16, sum2)) << "second reduce_scatter" << at;
      }
      garbage(part);
      garbage(part2);

      Buffer acc(DType::f32, n * p + 3, mem), acc2(DType::f32, n * p + 3, mem);  // in place, unequal ring chunks
      acc.fill([&](std::int64_t i) { return sum_value(r, i, 4); });
      acc2.fill([&](std::int64_t i) { return sum_value(r, i, 7); });
      std::vector<double> got(static_cast<std::size_t>(n * p + 3));
      run([&] { return c.start_all_reduce(acc.view(), ReduceOp::sum, StreamRef::host()); },
          [&] {
            for (std::int64_t i = 0; i < n * p + 3; ++i) got[static_cast<std::size_t>(i)] = acc.get(i);
            garbage(acc);
            return c.start_all_reduce(acc2.view(), ReduceOp::sum, StreamRef::host());
          });
      for (std::int64_t i = 0; i < n * p + 3; ++i) {
        double sum = 0, sum2 = 0;
        for (int q = 0; q < p; ++q) sum += sum_value(q, i, 4), sum2 += sum_value(q, i, 7);
        ASSERT_EQ(got[static_cast<std::size_t>(i)], sum) << "all_reduce" << at << " i=" << i;
        ASSERT_EQ(acc2.get(i), sum2) << "second all_reduce" << at << " i=" << i;
      }
      garbage(acc2);

      Buffer b(DType::f32, n, mem);
      const int root = (late + 1) % p;
      b.fill([&](std::int64_t i) { return r == root ? copy_value(root, i, 5) : 0.0; });
      run([&] { return c.start_broadcast(b.view(), root, StreamRef::host()); });
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(b.get(i), copy_value(root, i, 5)) << "broadcast" << at;
      garbage(b);

      // Uneven exchange: rank r sends (r + q) % 3 * n + 1 elements to rank q (all_to_all: n to each).
      for (bool uneven : {false, true}) {
        const Exchange x = exchange(p, r, 8, [&](int from, int to) {
          return uneven ? static_cast<std::int64_t>((from + to) % 3) * n + 1 : n;
        });
        const auto nr = static_cast<std::int64_t>(x.expected.size());
        Buffer a_in(DType::f32, x.send_total, mem), a_out(DType::f32, nr, mem);
        a_in.fill([&](std::int64_t i) { return copy_value(r, i, 8); });
        run([&] {
          return uneven ? c.start_all_to_allv(a_in.cview(), x.send, a_out.view(), x.recv, StreamRef::host())
                        : c.start_all_to_all(a_in.cview(), a_out.view(), StreamRef::host());
        });
        garbage(a_in);
        for (std::int64_t i = 0; i < nr; ++i)
          ASSERT_EQ(a_out.get(i), x.expected[static_cast<std::size_t>(i)])
              << (uneven ? "all_to_allv" : "all_to_all") << " element " << i << at;
        garbage(a_out);
      }
    }
  }
}

class ShmKeptSends : public ::testing::TestWithParam<std::pair<std::size_t, Copies>> {};
INSTANTIATE_TEST_SUITE_P(Algorithms, ShmKeptSends,
                         ::testing::Values(std::pair{std::size_t{0}, kSingleCopy},
                                           std::pair{std::size_t{1} << 40, kSingleCopy},
                                           std::pair{std::size_t{0}, kMapped},
                                           std::pair{std::size_t{1} << 40, kMapped}),
                         [](const auto& info) { return algorithms_name(info.param); });

TEST_P(ShmKeptSends, SurviveALateReader) {
  const Memory mem = GetParam().second.memory;
  auto world = make_world(tiny_rings(GetParam().first, GetParam().second));
  const int p = world->size(), r = world->rank();
  if (p > 1) {
    ASSERT_EQ(world->mapped_buffers(), mem == Memory::shared);
  }
  const ShmMessageCounts before = shm_message_counts();
  survive_late_reader(*world, MPI_COMM_WORLD, mem, "world");
  if (p >= 4) {
    const bool member = r < p - 1;
    auto group = world->split(member ? 0 : -1, r, "all but the last");
    MPI_Comm same_group = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, r, &same_group);
    if (member) survive_late_reader(*group, same_group, mem, "all but the last");
    if (same_group != MPI_COMM_NULL) MPI_Comm_free(&same_group);
  }
  if (p > 1) {
    const ShmMessageCounts after = shm_message_counts();
    if (mem == Memory::shared)
      EXPECT_GT(after.mapped, before.mapped);
    else
      EXPECT_GT(after.single_copy, before.single_copy);
    EXPECT_GT(after.ended_early, before.ended_early);
  }
}

class ShmCopies : public ::testing::TestWithParam<Copies> {};
INSTANTIATE_TEST_SUITE_P(Copies, ShmCopies, ::testing::Values(kSlots, kSingleCopy, kMapped),
                         [](const auto& info) { return copies_name(info.param); });

// Single copy and mapped: message 7 is one descriptor instead of ten chunks; the peer keeps it aside by reading the
// whole message from the sender's buffer (the sender's wait only ends once it has), the rest as through the slots.
TEST_P(ShmCopies, MessagesArrivingBeforeTheirReceive) {
  HZP_REQUIRE_MIN_RANKS(2);
  const Memory mem = GetParam().memory;
  auto world = make_world(tiny_rings(0, GetParam()));
  auto c = world->duplicate("p2p");
  const int r = c->rank();
  const std::int64_t n = 10240;  // 40 KiB: ten chunks through a two-slot ring
  auto barrier = [] { hzp::test::run_then_barrier([] {}); };
  Buffer first(DType::f32, n, mem), second(DType::f32, n, mem), third(DType::f32, 3, mem);
  if (r == 0) {
    first.fill([&](std::int64_t i) { return copy_value(1, i); });
    second.fill([&](std::int64_t i) { return copy_value(2, i); });
    third.fill([&](std::int64_t i) { return copy_value(3, i); });
    // Posted in the order 1, 2; the peer receives 2 first, so all of message 1 is kept aside there.
    Request s1 = c->start_send(first.cview(), 1, 1, StreamRef::host());
    Request s2 = c->start_send(second.cview(), 1, 2, StreamRef::host());
    s1.wait();
    s2.wait();
    barrier();  // (A) the peer has drained the ring
    // Message 7 fills the two slots and stops there: the barriers do not pump.
    Request s7 = c->start_send(first.cview(), 1, 7, StreamRef::host());
    barrier();  // (B) its first two chunks are in the ring
    barrier();  // (C) the peer kept them aside, then posted the receive that takes the message over
    s7.wait();
    c->send(third.cview(), 1, 9, StreamRef::host());
  } else if (r == 1) {
    c->recv(second.view(), 0, 2, StreamRef::host());
    c->recv(first.view(), 0, 1, StreamRef::host());
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(first.get(i), copy_value(1, i));
      ASSERT_EQ(second.get(i), copy_value(2, i));
    }
    barrier();  // (A)
    barrier();  // (B)
    Request r9 = c->start_recv(third.view(), 0, 9, StreamRef::host());
    EXPECT_FALSE(r9.test());  // pumps: two chunks of message 7, no receive for it yet
    Buffer seventh(DType::f32, n, mem);
    Request r7 = c->start_recv(seventh.view(), 0, 7, StreamRef::host());
    barrier();  // (C)
    r7.wait();
    r9.wait();
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(seventh.get(i), copy_value(1, i));
    for (std::int64_t i = 0; i < 3; ++i) ASSERT_EQ(third.get(i), copy_value(3, i));
  } else {
    for (int k = 0; k < 3; ++k) barrier();
  }
}

TEST_P(ShmCopies, OverlappingCollectivesCompletedInReverseOrder) {
  const Memory mem = GetParam().memory;
  auto world = make_world(tiny_rings(0, GetParam()));
  const int p = world->size(), r = world->rank();
  const std::int64_t n = 4000;
  Buffer in(DType::f32, n, mem), out(DType::f32, n * p, mem), acc(DType::bf16, n * 2, mem);
  in.fill([&](std::int64_t i) { return copy_value(r, i); });
  acc.fill([&](std::int64_t i) { return sum_value(r, i); });
  Request a = world->start_all_gather(in.cview(), out.view(), StreamRef::host());
  Request b = world->start_all_reduce(acc.view(), ReduceOp::sum, StreamRef::host());
  b.wait();  // its chunks queue behind a's on every ring
  a.wait();
  for (int q = 0; q < p; ++q)
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out.get(q * n + i), copy_value(q, i));
  for (std::int64_t i = 0; i < 2 * n; ++i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += sum_value(q, i);
    ASSERT_EQ(acc.get(i), stored(DType::bf16, s));
  }
}

// Two duplicates, each driven by its own thread at once, with large messages: every result exact
// (a chunk delivered on the wrong communicator would show), counters kept apart.
TEST_P(ShmCopies, TwoDuplicatesFromTwoThreadsConcurrently) {
  const Memory mem = GetParam().memory;
  MpiCommConfig cfg = test_config();
  cfg.single_copy_bytes = GetParam().single_copy_bytes;
  cfg.mapped_buffers = mem == Memory::shared;
  cfg.transport = Transport::shm;
  cfg.shm_slot_bytes = 16384;
  cfg.shm_slots = 3;
  cfg.small_message_bytes = 0;
  auto world = make_world(cfg);
  auto a = world->duplicate("prefetch", /*share_counters=*/false);
  auto b = world->duplicate("drain", /*share_counters=*/false);
  const int p = world->size(), r = world->rank();
  const int iters = hzp::test::world_size() >= 8 ? 2 : 4;
  auto body = [&](Communicator& c, int salt, std::string& why) {
    try {
      const std::int64_t n = 20000 + 17 * salt;
      // Made once per thread, refilled with new values every iteration: a buffer freed by one thread while the
      // other maps its peer's buffers could come back at the same address as a mapping, which ThreadSanitizer
      // then takes for a race between the first thread's writes and the second's reads (seen about once in 20
      // runs before).
      Buffer in(DType::bf16, n, mem), out(DType::bf16, n * p, mem);
      Buffer full(DType::bf16, n * p, mem), part(DType::bf16, n, mem);
      Buffer acc(DType::f32, n, mem);
      for (int it = 0; it < iters && why.empty(); ++it) {
        const int s = salt + it;
        in.fill([&](std::int64_t i) { return copy_value(r, i, s); });
        c.all_gather(in.cview(), out.view(), StreamRef::host());
        for (int q = 0; q < p && why.empty(); ++q)
          for (std::int64_t i = 0; i < n; ++i)
            if (out.get(q * n + i) != stored(DType::bf16, copy_value(q, i, s))) {
              why = c.name() + ": all_gather block " + std::to_string(q);
              break;
            }
        full.fill([&](std::int64_t i) { return sum_value(r, i, s); });
        c.reduce_scatter(full.cview(), part.view(), ReduceOp::sum, StreamRef::host());
        for (std::int64_t i = 0; i < n && why.empty(); ++i) {
          double sum = 0;
          for (int q = 0; q < p; ++q) sum += sum_value(q, r * n + i, s);
          if (part.get(i) != stored(DType::bf16, sum)) why = c.name() + ": reduce_scatter element " + std::to_string(i);
        }
        acc.fill([&](std::int64_t i) { return sum_value(r, i, s); });
        Request req = c.start_all_reduce(acc.view(), ReduceOp::sum, StreamRef::host());
        while (!req.test()) std::this_thread::yield();  // completed by polling, as a prefetcher does
        for (std::int64_t i = 0; i < n && why.empty(); ++i) {
          double sum = 0;
          for (int q = 0; q < p; ++q) sum += sum_value(q, i, s);
          if (acc.get(i) != static_cast<float>(sum)) why = c.name() + ": all_reduce element " + std::to_string(i);
        }
      }
    } catch (const std::exception& e) {
      why = c.name() + ": " + e.what();
    }
  };
  std::string wa, wb;
  std::thread ta([&] { body(*a, 0, wa); });
  std::thread tb([&] { body(*b, 50, wb); });
  ta.join();
  tb.join();
  EXPECT_TRUE(wa.empty()) << wa;
  EXPECT_TRUE(wb.empty()) << wb;
  EXPECT_EQ(a->counters().snapshot().total(CollOp::all_gather).calls, static_cast<std::uint64_t>(iters));
  EXPECT_EQ(b->counters().snapshot().total(CollOp::reduce_scatter).calls, static_cast<std::uint64_t>(iters));
}

}  // namespace
}  // namespace hzp::coll::test
