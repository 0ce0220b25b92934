// The stream ring attention's exchanges run on when it runs on a CUDA stream (docs/cuda.md "Context parallelism on
// the GPU"), with the two events that order it against the compute stream. Kept by whoever runs the ring pass after
// pass (a Llama context keeps one), so no stream or event is created per attention call.
#pragma once

#include "hzp/core/device.hpp"
#include "hzp/core/stream.hpp"

namespace hzp::workloads {

struct RingExchangeLane {
  explicit RingExchangeLane(Device device) : stream(device), issued(device), arrived(device) {}

  /// The exchanges' own stream: the compute stream runs the block in hand while the next one travels here (NCCL
  /// orders the stream a batch is issued on after the batch, so issued on the compute stream nothing would overlap).
  Stream stream;
  /// Recorded on the compute stream where a batch is issued (its send buffers written, its receive slots read for
  /// the last time by the blocks enqueued before); the lane waits for it before the batch.
  Event issued;
  /// Recorded on the lane after the latest batch; the compute stream waits for it right before the blocks that
  /// read what arrived.
  Event arrived;
};

}  // namespace hzp::workloads
