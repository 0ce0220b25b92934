// Link emulation: the per-level link model, the busy-until clocks (an atomic per rank for its
// intra-node port; an atomic in a POSIX shared-memory segment per node for its network interface),
// and the sleep that fills a call up to its modelled time.
//
// Why POSIX shared memory and not an MPI shared-memory window: the segment is created, opened and
// unlinked inside the (collective) constructor, after which every rank only maps and unmaps it,
// locally. An MPI window would need a collective MPI_Win_free when the last communicator of a
// world goes away, which ranks reach at different points of their programs (a deadlock risk).
#include "hzp/collectives/link_emulator.hpp"

#include <errno.h>
#include <fcntl.h>
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

// Reserves [max(from, busy), + dur) on a clock; returns the start.
std::int64_t reserve_clock(std::atomic<std::int64_t>& busy, std::int64_t from, std::int64_t dur) noexcept {
  std::int64_t cur = busy.load(std::memory_order_relaxed);
  std::int64_t start = 0;
  do {
    start = std::max(cur, from);
  } while (!busy.compare_exchange_weak(cur, start + dur, std::memory_order_acq_rel, std::memory_order_relaxed));
  return start;
}

void extend_clock(std::atomic<std::int64_t>& busy, std::int64_t until) noexcept {
  std::int64_t cur = busy.load(std::memory_order_relaxed);
  while (cur < until && !busy.compare_exchange_weak(cur, until, std::memory_order_acq_rel)) {
  }
}

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

static_assert(std::atomic<std::int64_t>::is_always_lock_free,
              "the node clock lives in shared memory: it must be a lock-free atomic");

LinkEmulator::LinkEmulator(const LinkEmulationConfig& config, std::span<const int> node_of_world_rank,
                           int world_rank, MPI_Comm world)
    : config_(config) {
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
  shm_bytes_ = 64;  // one cache line for the clock

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
    nic_busy_ns_ = create ? new (p) std::atomic<std::int64_t>(0) : static_cast<std::atomic<std::int64_t>*>(p);
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
    nic_busy_ns_ = nullptr;
    HZP_THROW(IoError, "link emulation needs the ranks of each node to share memory (one machine per node): ",
              error.empty() ? std::string("another rank failed to map its node's clock") : error);
  }
}

LinkEmulator::LinkEmulator(const LinkEmulationConfig& config) : config_(config) {
  config_.validate();
  nic_busy_ns_ = &local_nic_busy_ns_;
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

double LinkEmulator::reserve(double join_s, const CollectiveModel& m) {
  const std::int64_t from = to_ns(join_s);
  std::int64_t ready = from;
  if (m.intra_busy_s > 0) ready = std::max(ready, reserve_clock(intra_busy_ns_, from, to_ns(m.intra_busy_s)));
  if (m.nic_busy_s > 0 && nic_busy_ns_)
    ready = std::max(ready, reserve_clock(*nic_busy_ns_, from, to_ns(m.nic_busy_s)));
  return to_s(ready);
}

void LinkEmulator::settle(double start_s, const CollectiveModel& m) {
  if (m.intra_busy_s > 0) extend_clock(intra_busy_ns_, to_ns(start_s + m.intra_busy_s));
  if (m.nic_busy_s > 0 && nic_busy_ns_) extend_clock(*nic_busy_ns_, to_ns(start_s + m.nic_busy_s));
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
