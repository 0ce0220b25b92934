// Request: the move-only handle of an in-flight operation.
#include <cstdio>

#include "hzp/collectives/communicator.hpp"
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

bool Request::test() {
  if (!impl_) return true;
  bool done = false;
  try {
    done = impl_->test();
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

}  // namespace hzp::coll
