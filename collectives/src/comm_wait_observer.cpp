// The per-thread observed counter behind observe_comm_waits (comm_wait_observer.hpp).
#include "hzp/collectives/comm_wait_observer.hpp"

namespace hzp::coll {
namespace {
thread_local std::atomic<int>* t_observed = nullptr;
}

void observe_comm_waits(std::atomic<int>* counter) noexcept { t_observed = counter; }

namespace detail {
CommWaitScope::CommWaitScope() noexcept : counter_(t_observed) {
  if (counter_ != nullptr) counter_->fetch_add(1, std::memory_order_relaxed);
}
CommWaitScope::~CommWaitScope() {
  if (counter_ != nullptr) counter_->fetch_sub(1, std::memory_order_relaxed);
}
}  // namespace detail

}  // namespace hzp::coll
