// Wait policies, transport names and MpiCommConfig validation (the settings that decide how a call
// moves its data and how a wait behaves).
#include "wait_policy.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cmath>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "mpi_check.hpp"

namespace hzp::coll {

std::string_view wait_policy_name(WaitPolicy p) noexcept { return name_of(kWaitPolicyNames, p); }

std::optional<WaitPolicy> parse_wait_policy(std::string_view name) noexcept { return value_of(kWaitPolicyNames, name); }

std::string_view transport_name(Transport t) noexcept { return name_of(kTransportNames, t); }

std::optional<Transport> parse_transport(std::string_view name) noexcept { return value_of(kTransportNames, name); }

void MpiCommConfig::validate() const {
  if (!(backoff_max_us > 0) || !std::isfinite(backoff_max_us))
    HZP_THROW(ConfigError, "collectives.backoff_max_us = ", backoff_max_us, " must be a positive number of us");
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    HZP_THROW(ConfigError, "collectives.timeout_s = ", timeout_s, " must be a positive number of seconds");
  if (!has_name(kWaitPolicyNames, wait_policy))
    HZP_THROW(ConfigError, "collectives.wait_policy = ", static_cast<int>(wait_policy), " is not one of ",
              names_text(kWaitPolicyNames));
  if (!has_name(kTransportNames, transport))
    HZP_THROW(ConfigError, "collectives.transport = ", static_cast<int>(transport), " is not one of ",
              names_text(kTransportNames));
  if (transport == Transport::shm && mpi_native)
    HZP_THROW(ConfigError, "collectives.transport = shm cannot be combined with collectives.mpi_native = true "
              "(MPICH's own collectives move their data themselves); use transport auto or mpi");
  // Slots hold whole pages, so chunk boundaries stay aligned for every element type and for vector copies.
  if (shm_slot_bytes < 4096 || shm_slot_bytes % 4096 != 0 || shm_slot_bytes > (std::size_t{64} << 20))
    HZP_THROW(ConfigError, "collectives.shm_slot_bytes = ", shm_slot_bytes,
              " must be a multiple of 4096 between 4096 and 67108864");
  if (shm_slots < 2 || shm_slots > 64)
    HZP_THROW(ConfigError, "collectives.shm_slots = ", shm_slots, " must be between 2 and 64");
  links.validate();
}

namespace detail {

WaitPacer::WaitPacer(WaitPolicy policy, double backoff_max_us) noexcept
    : policy_(policy), max_sleep_s_(backoff_max_us * 1e-6), sleep_s_(1e-6) {}

void WaitPacer::reset() noexcept {
  sleep_s_ = 1e-6;
  yield_until_s_ = -1;
}

void WaitPacer::pause() noexcept {
  if (policy_ == WaitPolicy::yield) {
    sched_yield();
    return;
  }
  if (policy_ == WaitPolicy::mixed) {
    // Not remembered across waits: on a machine loaded by other processes a slow yield is common
    // and says nothing about the next wait (measured: remembering it for 1 s made inline waits at
    // 2 ranks as slow as backoff, docs/collectives.md "Wait policy").
    const double now = wall_seconds();
    if (yield_until_s_ < 0) yield_until_s_ = now + kMixedYieldSeconds;
    if (now < yield_until_s_) {
      sched_yield();
      // A yield that took long handed the core to another thread for its time slice: the cores
      // are oversubscribed, where sleeping serves better (the scheduler favours a waking sleeper
      // over a thread that keeps yielding), so back off from now on.
      if (wall_seconds() - now > kSlowYieldSeconds) yield_until_s_ = 0;
      return;
    }
  }
  // Sleep, doubling from 1 us: a short wait stays short, a long one costs few polls.
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(sleep_s_);
  ts.tv_nsec = static_cast<long>((sleep_s_ - static_cast<double>(ts.tv_sec)) * 1e9);
  nanosleep(&ts, nullptr);
  sleep_s_ = std::min(sleep_s_ * 2, max_sleep_s_);
}

void wait_mpi_request(MPI_Request& req, const MpiCommConfig& config, std::string_view what,
                      std::string_view group) {
  const double t0 = wall_seconds();
  WaitPacer pacer(config.wait_policy, config.backoff_max_us);
  for (;;) {
    int done = 0;
    HZP_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (wall_seconds() - t0 > config.timeout_s)
      HZP_THROW(TimeoutError, what, " on group '", group, "' did not complete within collectives.timeout_s = ",
                config.timeout_s, " s (a peer did not join)");
    pacer.pause();
  }
}

}  // namespace detail
}  // namespace hzp::coll
