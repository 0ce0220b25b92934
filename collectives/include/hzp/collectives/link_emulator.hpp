// Link emulation (docs/architecture.md and docs/collectives.md, "Link emulation"): per level (intra,
// inter) a latency and a bandwidth; each link keeps the bookings of its calls (link_book.hpp) so that
// concurrent collectives on one link share it. Links: each rank's own intra-node port (shared by the threads
// of the process), and each (virtual) node's network interface (shared by the ranks of the node, through a
// small POSIX shared-memory segment holding its bookings and a process-shared lock). The communicator turns a
// collective's rounds into a modelled duration here and sleeps whatever the real transfer left of it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hzp/collectives/link_book.hpp"
#include "hzp/collectives/types.hpp"

namespace hzp::coll {

/// One level's link. A message of b bytes occupies its sender's link for latency + b / bandwidth.
struct LinkModel {
  double latency_us = 0;     // >= 0
  double bandwidth_gbps = 1; // GB/s (gigabytes per second), > 0

  /// Seconds a message of `bytes` occupies the link.
  double seconds(std::uint64_t bytes) const noexcept {
    return latency_us * 1e-6 + static_cast<double>(bytes) / (bandwidth_gbps * 1e9);
  }
};

/// links.emulate and links.{intra,inter}.{latency_us,bandwidth_gbps} of the option table.
struct LinkEmulationConfig {
  bool enabled = false;
  LinkModel intra{50, 0.036};
  LinkModel inter{200, 0.004};

  const LinkModel& at(LinkLevel level) const noexcept { return level == LinkLevel::intra ? intra : inter; }
  /// Throws ConfigError naming the key and value of the first impossible setting.
  void validate() const;
};

/// The messages one rank posts in one round of an algorithm: bytes per (level, destination) are
/// folded into the loads the model needs.
struct RoundLoad {
  std::uint64_t intra_bytes = 0;  // sent by this rank to ranks on its node
  int intra_messages = 0;
  std::uint64_t inter_bytes = 0;  // sent by this rank to other nodes (through its node's interface)
  int inter_messages = 0;
};

/// Outcome of the model for one collective, from the calling rank's point of view.
struct CollectiveModel {
  double duration_s = 0;     // modelled duration from the (last) join to completion
  double intra_busy_s = 0;   // how long this rank's intra port is occupied
  double nic_busy_s = 0;     // how long this rank's node interface is occupied on this group's
                             // behalf, charged by the group's lowest rank on the node (else 0)
};

/// The model of a collective whose every rank's rounds are known (LinkEmulator::model, without an emulator): pure
/// arithmetic on the links, so `hzpbench simulate` charges a call exactly what an emulated run would.
CollectiveModel model_collective(const LinkEmulationConfig& links, std::span<const std::vector<RoundLoad>> loads,
                                 std::span<const int> node_of, int me);

/// Where LinkEmulator::reserve booked a call: what settle moves once the call's real start is known.
struct LinkReservation {
  double ready_s = 0;           // when this rank's links are free for the call (>= its join)
  std::int64_t booked_ns = 0;   // where its bookings on those links start (ready_s in nanoseconds)
};

struct SharedLinkBook;  // one link's bookings behind a lock (link_emulator.cpp)

/// Process-wide emulation state of one world: the link models, the node of every world rank, this
/// rank's intra port clock and its node's interface clock (shared memory). Thread-safe.
class LinkEmulator {
 public:
  /// Collective over `world` (every rank calls it): creates one shared-memory clock per node of
  /// `node_of_world_rank`. Throws ConfigError when the config is invalid and IoError when a node's
  /// ranks cannot share memory (its ranks are on different machines).
  LinkEmulator(const LinkEmulationConfig& config, std::span<const int> node_of_world_rank,
               int world_rank, MPI_Comm world);
  /// One process alone (a phantom world, docs/phantom.md): the node interface's clock lives in this process, since
  /// no other process shares the node. No MPI call.
  explicit LinkEmulator(const LinkEmulationConfig& config);
  ~LinkEmulator();
  LinkEmulator(const LinkEmulator&) = delete;
  LinkEmulator& operator=(const LinkEmulator&) = delete;

  const LinkEmulationConfig& config() const noexcept { return config_; }

  /// Model of a collective whose every rank's rounds are known: loads[q][k] is what group rank q
  /// sends in round k (rounds aligned by index); node_of[q] the node of group rank q; me the
  /// calling group rank. Round time = the slowest link in the round (an intra port carrying one
  /// rank's messages, or a node interface carrying all of its ranks' inter-node messages); duration
  /// = sum over rounds.
  CollectiveModel model(std::span<const std::vector<RoundLoad>> loads, std::span<const int> node_of,
                        int me) const;

  /// Books this rank's links for a collective that can start at `join_s` (the group's last join, once the call's
  /// join round has told it; this rank's own join where there is none), tentatively: at the earliest time at or
  /// after join_s when every link it uses (its port for intra_busy_s, its node's interface for nic_busy_s) has
  /// a free gap that long. That time is this rank's "ready" time.
  LinkReservation reserve(double join_s, const CollectiveModel& m);
  /// Once the collective's real start (the group's last ready time) is known: moves the tentative bookings
  /// to [start_s, start_s + busy), when the call runs, so the time between this rank's ready and a late start
  /// goes back to the link for other calls.
  void settle(const LinkReservation& r, double start_s, const CollectiveModel& m);
  /// The bookings this process sees on its port (intra) or its node's interface (inter), in seconds, in
  /// time order: for tests and debugging.
  std::vector<LinkInterval<double>> bookings(LinkLevel level) const;

  /// Sleeps (clock_nanosleep, never spinning) until wall_seconds() >= until_s.
  static void sleep_until(double until_s);

 private:
  LinkEmulationConfig config_;
  std::unique_ptr<SharedLinkBook> intra_;      // this rank's port
  std::unique_ptr<SharedLinkBook> local_nic_;  // the node interface of a phantom world
  SharedLinkBook* nic_ = nullptr;              // in the node's shared-memory segment, or local_nic_
  void* shm_ = nullptr;
  std::size_t shm_bytes_ = 0;
};

}  // namespace hzp::coll
