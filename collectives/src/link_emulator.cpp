// Link emulation: the per-level link model, the links' bookings (link_book.hpp behind a lock: per rank in
// the process for its intra-node port; per node in a POSIX shared-memory segment, with a process-shared
// mutex, for its network interface), and the sleep that fills a call up to its modelled time.
//
// Why POSIX shared memory and not an MPI shared-memory window: the segment is created, opened and
// unlinked inside the (collective) constructor, after which every rank only maps and unmaps it,
// locally. An MPI window would need a collective MPI_Win_free when the last communicator of a
// world goes away, which ranks reach at different points of their programs (a deadlock risk).
#include "hzp/collectives/link_emulator.hpp"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "mpi_check.hpp"

namespace hzp::coll {
namespace {

std::int64_t to_ns(double s) noexcept { return static_cast<std::int64_t>(std::llround(s * 1e9)); }
double to_s(std::int64_t ns) noexcept { return static_cast<double>(ns) * 1e-9; }

std::int64_t busy_ns(double s) noexcept { return s > 0 ? to_ns(s) : 0; }

}  // namespace

// A link keeps this many bookings: a few ranks' pending calls and the recent past (a settle may look back to a start
// that passed while its transfer ran). The earliest is forgotten to make room. 8 KiB per node segment.
constexpr std::size_t kLinkBookings = 512;
using NsBook = LinkBook<std::int64_t, FixedIntervals<std::int64_t, kLinkBookings>>;

// One link's bookings and the lock every thread (and, in a node's segment, every rank of the node) takes around them.
// A mutex and not a lock-free scheme: a booking scans and shifts the list, and a process-shared mutex sleeps in the
// kernel instead of spinning while a descheduled holder waits for one of the oversubscribed cores.
struct SharedLinkBook {
  explicit SharedLinkBook(bool across_processes) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, across_processes ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE);
    // Robust: a rank killed inside the few instructions it holds the node's lock must not leave the node's other
    // ranks blocked forever (a hang); the next locker is told and takes the list as it was left (Hold).
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&mu, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  pthread_mutex_t mu;
  NsBook book;
};

namespace {

// Holds a link's lock when the call uses the link (a null or unused link is not locked: the interface's lock is the
// node's, and a call of the port alone should not wait on the node's other ranks).
class Hold {
 public:
  Hold(SharedLinkBook* b, bool use) : b_(use ? b : nullptr) {
    // EOWNERDEAD: the holder died mid-booking. Its half-made booking at worst double-books a slot of a run that is
    // failing anyway (the dead rank's peers time out on it); the lock itself is made usable again.
    if (b_ && pthread_mutex_lock(&b_->mu) == EOWNERDEAD) pthread_mutex_consistent(&b_->mu);
  }
  ~Hold() {
    if (b_) pthread_mutex_unlock(&b_->mu);
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;

 private:
  SharedLinkBook* b_;
};

const NsBook kNoBookings{};  // stands for a link the call does not use (reserve reads it unlocked)

void check_level(const LinkModel& m, const char* level) {
  if (!(m.latency_us >= 0) || !std::isfinite(m.latency_us))
    HZP_THROW(ConfigError, "links.", level, ".latency_us = ", m.latency_us, " must be >= 0");
  if (!(m.bandwidth_gbps > 0) || !std::isfinite(m.bandwidth_gbps))
    HZP_THROW(ConfigError, "links.", level, ".bandwidth_gbps = ", m.bandwidth_gbps,
              " must be > 0 (GB/s; 0.004 = 4 MB/s)");
}

}  // namespace

void LinkEmulationConfig::validate() const {
  check_level(intra, "intra");
  check_level(inter, "inter");
}

LinkEmulator::LinkEmulator(const LinkEmulationConfig& config, std::span<const int> node_of_world_rank,
                           int world_rank, MPI_Comm world)
    : config_(config), intra_(std::make_unique<SharedLinkBook>(false)) {
  config_.validate();
  const int my_node = node_of_world_rank[static_cast<std::size_t>(world_rank)];
  int leader = world_rank;  // lowest world rank on my node creates the segment
  for (std::size_t r = 0; r < node_of_world_rank.size(); ++r)
    if (node_of_world_rank[r] == my_node) {
      leader = static_cast<int>(r);
      break;
    }

  // A name unique to this world: chosen by world rank 0, known to all.
  unsigned long long uid = 0;
  if (world_rank == 0)
    uid = (static_cast<unsigned long long>(getpid()) << 32) ^ static_cast<unsigned long long>(to_ns(wall_seconds()));
  HZP_MPI_CHECK(MPI_Bcast(&uid, 1, MPI_UNSIGNED_LONG_LONG, 0, world));
  const std::string name = "/hzp-link-" + std::to_string(uid) + "-" + std::to_string(my_node);
  shm_bytes_ = sizeof(SharedLinkBook);

  std::string error;
  auto map = [&](bool create) {
    const int fd = shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
    if (fd < 0) {
      error = std::string("shm_open(") + name + ") failed: " + std::strerror(errno);
      return;
    }
    if (create && ftruncate(fd, static_cast<off_t>(shm_bytes_)) != 0) {
      error = std::string("ftruncate(") + name + ") failed: " + std::strerror(errno);
      close(fd);
      return;
    }
    void* p = mmap(nullptr, shm_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      error = std::string("mmap(") + name + ") failed: " + std::strerror(errno);
      return;
    }
    shm_ = p;
    // Never destroyed: a process-shared mutex needs no destruction once every process has unmapped it.
    nic_ = create ? new (p) SharedLinkBook(true) : static_cast<SharedLinkBook*>(p);
  };
  if (world_rank == leader) map(true);
  HZP_MPI_CHECK(MPI_Barrier(world));
  if (world_rank != leader && error.empty()) map(false);
  // Every rank learns whether every rank succeeded, so all throw or none does (no rank is left
  // waiting in a later collective for one that threw).
  int ok = error.empty() ? 1 : 0, all_ok = 0;
  HZP_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, world));
  if (world_rank == leader) shm_unlink(name.c_str());  // mapped everywhere now: the name is not needed
  if (!all_ok) {
    if (shm_) munmap(shm_, shm_bytes_);
    shm_ = nullptr;
    nic_ = nullptr;
    HZP_THROW(IoError, "link emulation needs the ranks of each node to share memory (one machine per node): ",
              error.empty() ? std::string("another rank failed to map its node's link bookings") : error);
  }
}

LinkEmulator::LinkEmulator(const LinkEmulationConfig& config)
    : config_(config), intra_(std::make_unique<SharedLinkBook>(false)),
      local_nic_(std::make_unique<SharedLinkBook>(false)) {
  config_.validate();
  nic_ = local_nic_.get();
}

LinkEmulator::~LinkEmulator() {
  if (shm_) munmap(shm_, shm_bytes_);
}

CollectiveModel LinkEmulator::model(std::span<const std::vector<RoundLoad>> loads, std::span<const int> node_of,
                                    int me) const {
  return model_collective(config_, loads, node_of, me);
}

CollectiveModel model_collective(const LinkEmulationConfig& links, std::span<const std::vector<RoundLoad>> loads,
                                 std::span<const int> node_of, int me) {
  std::size_t rounds = 0;
  int max_node = 0;
  for (std::size_t q = 0; q < loads.size(); ++q) {
    rounds = std::max(rounds, loads[q].size());
    max_node = std::max(max_node, node_of[q]);
  }
  // The group's lowest rank on my node charges the node interface for the whole node.
  int node_leader = me;
  for (int q = 0; q < me; ++q)
    if (node_of[static_cast<std::size_t>(q)] == node_of[static_cast<std::size_t>(me)]) {
      node_leader = q;
      break;
    }
  std::vector<std::uint64_t> nic_bytes(static_cast<std::size_t>(max_node) + 1);
  std::vector<int> nic_msgs(static_cast<std::size_t>(max_node) + 1);
  CollectiveModel m;
  for (std::size_t k = 0; k < rounds; ++k) {
    std::fill(nic_bytes.begin(), nic_bytes.end(), 0);
    std::fill(nic_msgs.begin(), nic_msgs.end(), 0);
    double t = 0;
    for (std::size_t q = 0; q < loads.size(); ++q) {
      if (k >= loads[q].size()) continue;
      const RoundLoad& l = loads[q][k];
      if (l.intra_messages > 0) {
        const double port = links.intra.seconds(l.intra_bytes);
        t = std::max(t, port);
        if (static_cast<int>(q) == me) m.intra_busy_s += port;
      }
      nic_bytes[static_cast<std::size_t>(node_of[q])] += l.inter_bytes;
      nic_msgs[static_cast<std::size_t>(node_of[q])] += l.inter_messages;
    }
    for (std::size_t v = 0; v < nic_bytes.size(); ++v) {
      if (nic_msgs[v] == 0) continue;
      const double nic = links.inter.seconds(nic_bytes[v]);
      t = std::max(t, nic);
      if (node_leader == me && static_cast<int>(v) == node_of[static_cast<std::size_t>(me)]) m.nic_busy_s += nic;
    }
    m.duration_s += t;
  }
  return m;
}

// Both links are locked together (always the port first, then the interface: one order, no deadlock), so a call's
// two bookings start at one time, as the simulator books them (earliest_on_both).
LinkReservation LinkEmulator::reserve(double join_s, const CollectiveModel& m) {
  const std::int64_t di = busy_ns(m.intra_busy_s), dn = nic_ ? busy_ns(m.nic_busy_s) : 0;
  const Hold hi(intra_.get(), di > 0), hn(nic_, dn > 0);
  const NsBook& intra = di > 0 ? intra_->book : kNoBookings;
  const NsBook& nic = dn > 0 ? nic_->book : kNoBookings;
  const std::int64_t t = earliest_on_both(intra, di, nic, dn, to_ns(join_s));
  if (di > 0) intra_->book.book(t, di);
  if (dn > 0) nic_->book.book(t, dn);
  return {to_s(t), t};
}

void LinkEmulator::settle(const LinkReservation& r, double start_s, const CollectiveModel& m) {
  const std::int64_t di = busy_ns(m.intra_busy_s), dn = nic_ ? busy_ns(m.nic_busy_s) : 0;
  const Hold hi(intra_.get(), di > 0), hn(nic_, dn > 0);
  // The call holds its links from its real start for its busy time, where every member's modelled end puts it, even
  // should a call booked since (behind the tentative booking) hold part of that: the two share the link there. Moving
  // it past them instead would hold the link for a time the call is not running, and delay whoever books next.
  const std::int64_t t = std::max(to_ns(start_s), r.booked_ns);
  if (di > 0) {
    intra_->book.release(r.booked_ns, di);
    intra_->book.book(t, di);
  }
  if (dn > 0) {
    nic_->book.release(r.booked_ns, dn);
    nic_->book.book(t, dn);
  }
}

std::vector<LinkInterval<double>> LinkEmulator::bookings(LinkLevel level) const {
  SharedLinkBook* b = level == LinkLevel::intra ? intra_.get() : nic_;
  std::vector<LinkInterval<double>> out;
  if (!b) return out;
  const Hold h(b, true);
  for (std::size_t i = 0; i < b->book.size(); ++i) out.push_back({to_s(b->book[i].start), to_s(b->book[i].end)});
  return out;
}

void LinkEmulator::sleep_until(double until_s) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(until_s);
  ts.tv_nsec = static_cast<long>((until_s - static_cast<double>(ts.tv_sec)) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  // Absolute CLOCK_MONOTONIC (what wall_seconds() reads): no drift when interrupted and resumed.
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace hzp::coll
