// StreamOrderedRequests (stream_ordered_requests.hpp): collectives kept on a CUDA stream until the step's end,
// waited for at once on the host.
#include "hzp/collectives/stream_ordered_requests.hpp"

#include <utility>

namespace hzp::coll {

void StreamOrderedRequests::settle(Request r) {
  if (completion_ == Completion::at_once)
    r.wait();
  else
    kept_.push_back(std::move(r));
}

void StreamOrderedRequests::complete() {
  if (kept_.empty()) return;
  // Taken out first: whatever happens below, the keeper is empty afterwards, and a request left unwaited by a
  // failure is waited for (and its own failure logged) when `pending` goes out of scope.
  std::vector<Request> pending = std::move(kept_);
  kept_.clear();
  stream_.synchronize();
  for (Request& r : pending) r.wait();
}

}  // namespace hzp::coll
