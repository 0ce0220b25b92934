// Communicator::start_p2p_batch's default (communicator.hpp): each message started as its own start_recv /
// start_send, the batch one Request over them. Backends whose single calls cannot deadlock (MPI's are
// non-blocking, a phantom world's are local) need nothing more; NCCL overrides it with one group.
#include <memory>
#include <utility>
#include <vector>

#include "hzp/collectives/communicator.hpp"

namespace hzp::coll {
namespace {

/// The batch's messages as one request: done when every part is. Polls reach every part, never stopping at the
/// first pending one (a shared-memory transfer moves only while its request is polled); a wait_all round timed
/// by the caller is counted on the first pending part, as wait_all counts it among separate requests.
class P2pBatchRequest final : public Request::Impl {
 public:
  explicit P2pBatchRequest(std::vector<Request> parts) : parts_(std::move(parts)) {}

  bool test() override { return poll_all(&Request::test); }
  bool test_untimed() override { return poll_all(&Request::test_untimed); }
  void wait() override { wait_all(parts_); }
  void add_wait(double seconds) override {
    if (Request* r = first_pending()) r->add_wait(seconds);
  }
  void pause() override {
    if (Request* r = first_pending())
      r->pause();
    else
      Request::Impl::pause();
  }

 private:
  bool poll_all(bool (Request::*poll)()) {
    bool all = true;
    for (Request& r : parts_) all = (r.*poll)() && all;
    return all;
  }
  Request* first_pending() {
    for (Request& r : parts_)
      if (!r.done()) return &r;
    return nullptr;
  }

  std::vector<Request> parts_;
};

}  // namespace

Request Communicator::start_p2p_batch(std::span<const SendOp> sends, std::span<const RecvOp> recvs, StreamRef s) {
  if (sends.empty() && recvs.empty()) return Request();
  std::vector<Request> parts;
  parts.reserve(sends.size() + recvs.size());
  for (const RecvOp& r : recvs) parts.push_back(start_recv(r.buf, r.peer, r.tag, s));
  for (const SendOp& m : sends) parts.push_back(start_send(m.buf, m.peer, m.tag, s));
  return Request(std::make_unique<P2pBatchRequest>(std::move(parts)));
}

}  // namespace hzp::coll
