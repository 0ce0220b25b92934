// BucketedAllReduce: DDP's gradient reduction. The flat gradient buffer is cut into contiguous buckets
// of whole units (at least `bucket_bytes` each, the last unit-aligned remainder smaller), in backward
// order; a bucket is all-reduced as soon as every block in it has its final gradient (counted per
// bucket from grads_final_after), either blocking inline or started non-blocking and waited at finish().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

class BucketedAllReduce {
 public:
  struct Bucket {
    int first_unit = 0;  ///< units [first_unit, last_unit], contiguous in the flat buffer
    int last_unit = 0;
    std::int64_t offset = 0;  ///< elements
    std::int64_t numel = 0;
  };

  /// Buckets of `layout` for `bucket_bytes` (> 0) of `elem_bytes`-byte gradients, formed from the last
  /// unit backwards (the order gradients become final). Pure; every rank computes the same buckets.
  static std::vector<Bucket> make_buckets(const workloads::ParamLayout& layout, std::size_t bucket_bytes,
                                          std::size_t elem_bytes);

  /// `grads` (flat [N], fp32, or int64 in deterministic mode) and `group` must outlive this object. overlap: start
  /// non-blocking, wait in finish(). On a CUDA `stream` (device gradients, a NCCL group) every bucket is started
  /// on it and the host waits only in finish(): the stream is ordered after each reduction either way.
  BucketedAllReduce(coll::Communicator& group, const workloads::ParamLayout& layout, TensorView grads,
                    std::size_t bucket_bytes, bool overlap, StreamRef stream = StreamRef::host());

  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  /// Starts the reduction window (clears readiness counts).
  void begin();
  /// Backward of `unit` has returned on the window's last micro-batch: launches every bucket that just
  /// became complete (sum over ranks, in place).
  void on_backward_done(int unit);
  /// Waits for every bucket launched; PreconditionError if a bucket was never launched.
  void finish();

 private:
  coll::Communicator* group_;
  const workloads::ParamLayout* layout_;
  TensorView grads_;
  bool overlap_;
  StreamRef stream_ = StreamRef::host();
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_unit_;
  std::vector<int> pending_;  // blocks still to finalise, per bucket
  std::vector<coll::Request> requests_;
  std::vector<bool> launched_;
};

}  // namespace hzp::schedulers
