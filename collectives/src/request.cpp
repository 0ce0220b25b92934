// Request: the move-only handle of an in-flight operation.
#include <cstdio>
#include <thread>

#include "hzp/collectives/comm_wait_observer.hpp"
#include "hzp/collectives/communicator.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll {

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      // Overwriting an unfinished request would drop a transfer whose buffers may be freed next.
      try {
        impl_->wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hzpbench: request overwritten before completion failed: %s\n", e.what());
      }
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Request::~Request() {
  if (!impl_) return;
  try {
    impl_->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hzpbench: request destroyed before completion failed: %s\n", e.what());
  }
}

bool Request::test() { return poll(&Impl::test); }

bool Request::test_untimed() { return poll(&Impl::test_untimed); }

bool Request::poll(bool (Impl::*test)()) {
  if (!impl_) return true;
  bool done = false;
  try {
    done = ((*impl_).*test)();
  } catch (...) {
    // As in wait(): a failed request is finished; it must not be waited on again (by the
    // destructor, say, which would report the failure a second time).
    impl_.reset();
    throw;
  }
  if (done) impl_.reset();
  return done;
}

void Request::wait() {
  if (!impl_) return;
  // Release the impl even when wait throws: a failed request must not be waited on again.
  auto impl = std::move(impl_);
  impl->wait();
}

void Request::Impl::pause() { std::this_thread::yield(); }

void Request::add_wait(double seconds) {
  if (impl_) impl_->add_wait(seconds);
}

void Request::pause() {
  if (impl_) impl_->pause();
}

void wait_all(std::span<Request> requests) {
  const CommWaitScope waiting;
  double round = wall_seconds();
  for (;;) {
    Request* pending = nullptr;
    for (Request& r : requests)
      if (!r.test_untimed() && pending == nullptr) pending = &r;
    if (pending == nullptr) return;
    pending->pause();
    const double now = wall_seconds();
    pending->add_wait(now - round);
    round = now;
  }
}

}  // namespace hzp::coll
