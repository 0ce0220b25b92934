// Lets a layer above see that one of its threads is blocked waiting for communication to finish. The
// harness's watchdog uses it to tell a rank that stopped on its own (the cause of a stall) from ranks
// that stopped because they wait for it in a collective (its echoes): both look idle to a heartbeat.
#pragma once

#include <atomic>

namespace hzp::coll {

/// From now on, while the calling thread waits for one of its requests (any collective or p2p of any
/// Communicator of this process), `*counter` is > 0. nullptr stops observing. One counter per thread;
/// the counter must outlive the observation.
void observe_comm_waits(std::atomic<int>* counter) noexcept;

namespace detail {
/// Held for the duration of a blocking wait: raises the calling thread's observed counter, if any.
class CommWaitScope {
 public:
  CommWaitScope() noexcept;
  ~CommWaitScope();
  CommWaitScope(const CommWaitScope&) = delete;
  CommWaitScope& operator=(const CommWaitScope&) = delete;

 private:
  std::atomic<int>* counter_;
};
}  // namespace detail

/// Held by a thread that blocks on communication issued by another thread (asynchzp's compute thread
/// waiting for its background threads' collectives): the observer counts it as a communication wait, as it
/// does a wait on one of the thread's own requests.
using CommWaitScope = detail::CommWaitScope;

}  // namespace hzp::coll
