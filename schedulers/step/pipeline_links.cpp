// PipelineLinks (pipeline_links.hpp): the pipeline group on the host; per-link communicators and send streams on
// a device.
#include "hzp/schedulers/step/pipeline_links.hpp"

#include <string>

#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {

PipelineLinks::PipelineLinks(coll::Communicator& pp, StreamRef compute, CachingAllocator& alloc)
    : pp_(pp), compute_(compute), produced_(compute.device()) {
  if (!on_device()) return;
  HZP_CHECK(alloc.device() == compute.device(), "pipeline links: the allocator hands out memory on ",
            to_string(alloc.device()), " but the compute stream is on ", to_string(compute.device()));
  for (int g = 0; g < 2; ++g)
    for (int t = 0; t < pp.size(); ++t)  // counters shared with the pipeline group: its traffic, per link
      into_[g].push_back(pp.duplicate(pp.name() + (g == 0 ? ".act>" : ".grad>") + std::to_string(t)));
  out_.emplace_back(compute.device());
  out_.emplace_back(compute.device());
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

coll::Request PipelineLinks::receive(TensorView into, int peer, int tag, bool gradient) {
  if (!on_device()) return pp_.start_recv(into, peer, tag, compute_);
  return into_[gradient ? 1 : 0].at(static_cast<std::size_t>(pp_.rank()))->start_recv(into, peer, tag, compute_);
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
