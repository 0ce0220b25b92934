// PipelineLinks (pipeline_links.hpp): the pipeline group on the host; per-link communicators, send and receive
// streams and pooled receive events on a device.
#include "hzp/schedulers/step/pipeline_links.hpp"

#include <string>

#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {

PipelineLinks::PipelineLinks(coll::Communicator& pp, StreamRef compute, CachingAllocator& alloc)
    : pp_(pp), compute_(compute), produced_(compute.device()), posted_(compute.device()) {
  if (!on_device()) return;
  HZP_CHECK(alloc.device() == compute.device(), "pipeline links: the allocator hands out memory on ",
            to_string(alloc.device()), " but the compute stream is on ", to_string(compute.device()));
  for (int g = 0; g < 2; ++g)
    for (int t = 0; t < pp.size(); ++t)  // counters shared with the pipeline group: its traffic, per link
      into_[g].push_back(pp.duplicate(pp.name() + (g == 0 ? ".act>" : ".grad>") + std::to_string(t)));
  for (int g = 0; g < 2; ++g) {
    out_.emplace_back(compute.device());
    in_.emplace_back(compute.device());
  }
  // Connect every link (pipeline_links.hpp, "The host"): links in one order everywhere, each waited for.
  const Allocation probe = alloc.allocate(sizeof(float), AllocationTag::comm);
  zero_bytes(probe.data(), sizeof(float), compute);
  const TensorView one(probe.data(), Shape{1}, DType::f32, compute.device());
  const int n = pp.size(), me = pp.rank();
  for (int g = 0; g < 2; ++g)
    for (int t = 0; t < n; ++t) {
      const int from = g == 0 ? (t + n - 1) % n : (t + 1) % n;
      coll::Communicator& link = *into_[g][static_cast<std::size_t>(t)];
      if (me == from) link.start_send(one, t, 0, compute).wait();
      if (me == t) link.start_recv(one, from, 0, compute).wait();
    }
  compute.synchronize();  // the probe goes back to the allocator
}

PipelineLinks::~PipelineLinks() = default;

PipelineLinks::Posted PipelineLinks::receive(TensorView into, int peer, int tag, bool gradient) {
  if (!on_device()) return {pp_.start_recv(into, peer, tag, compute_), nullptr};
  // The receive stream takes up where the compute stream is (the slot's memory may have been a queued kernel's);
  // start_recv orders the link's NCCL stream after it and it after the receive, so `arrived` follows the receive.
  const StreamRef lane = in_[gradient ? 1 : 0].ref();
  posted_.record(compute_);
  posted_.wait(lane);
  Posted r{into_[gradient ? 1 : 0].at(static_cast<std::size_t>(pp_.rank()))->start_recv(into, peer, tag, lane),
           nullptr};
  if (free_events_.empty()) {
    events_.push_back(std::make_unique<Event>(compute_.device()));
    free_events_.push_back(events_.back().get());
  }
  r.arrived = free_events_.back();
  free_events_.pop_back();
  r.arrived->record(lane);
  return r;
}

void PipelineLinks::arrive(Posted& r) {
  if (r.arrived == nullptr) return;
  coll::time_device_wait(compute_, coll::StallKind::at_use, [&] { r.arrived->wait(compute_); });
  free_events_.push_back(r.arrived);  // the wait is enqueued: the event may be recorded again
  r.arrived = nullptr;
}

coll::Request PipelineLinks::send(ConstTensorView buf, int peer, int tag, bool gradient) {
  if (!on_device()) return pp_.start_send(buf, peer, tag, compute_);
  // The send stream takes up where the compute stream is; the communicator orders itself after the send stream
  // and the send stream after the send (start_send's contract), so sends on one link stay in their posting order
  // and the compute stream is never made to wait.
  const StreamRef lane = out_[gradient ? 1 : 0].ref();
  produced_.record(compute_);
  produced_.wait(lane);
  return into_[gradient ? 1 : 0].at(static_cast<std::size_t>(peer))->start_send(buf, peer, tag, lane);
}

}  // namespace hzp::schedulers
