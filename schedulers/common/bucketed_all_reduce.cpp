// BucketedAllReduce (common/bucketed_all_reduce.hpp): unit-aligned buckets and their readiness counts.
#include "hzp/schedulers/common/bucketed_all_reduce.hpp"

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"

namespace hzp::schedulers {

std::vector<BucketedAllReduce::Bucket> BucketedAllReduce::make_buckets(const workloads::ParamLayout& layout,
                                                                       std::size_t bucket_bytes, std::size_t elem_bytes) {
  HZP_CHECK(bucket_bytes > 0, "BucketedAllReduce: bucket size must be > 0");
  std::vector<Bucket> out;
  int last = layout.num_units() - 1;
  std::int64_t acc = 0;
  for (int u = layout.num_units() - 1; u >= 0; --u) {
    acc += layout.unit_numel(u);
    // Whole units only, so a bucket's readiness is a count of units' final gradients. A pipeline stage's absent
    // units (no elements, no writer) join no bucket: a bucket always holds elements.
    if (acc > 0 && (static_cast<std::size_t>(acc) * elem_bytes >= bucket_bytes || u == 0)) {
      Bucket b;
      b.first_unit = u;
      b.last_unit = last;
      b.offset = layout.unit_offset(u);
      b.numel = acc;
      out.push_back(b);
      last = u - 1;
      acc = 0;
    }
  }
  return out;
}

BucketedAllReduce::BucketedAllReduce(coll::Communicator& group, const workloads::ParamLayout& layout,
                                     TensorView grads, std::size_t bucket_bytes, bool overlap, StreamRef stream)
    : group_(&group), layout_(&layout), grads_(grads), overlap_(overlap || stream.device().is_cuda()), stream_(stream) {
  HZP_CHECK(grads.device() == stream.device(), "BucketedAllReduce: gradients on ", to_string(grads.device()),
            " but the stream on ", to_string(stream.device()));
  HZP_CHECK(grads.numel() == layout.total_numel() && (grads.dtype() == DType::f32 || grads.dtype() == DType::i64),
            "BucketedAllReduce: gradient buffer of ", grads.numel(), " ", dtype_name(grads.dtype()), " for ",
            layout.total_numel(), " f32 (or int64) parameters");
  buckets_ = make_buckets(layout, bucket_bytes, dtype_size(grads.dtype()));
  bucket_of_unit_.assign(static_cast<std::size_t>(layout.num_units()), -1);
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b)
    for (int u = buckets_[b].first_unit; u <= buckets_[b].last_unit; ++u) bucket_of_unit_[u] = b;
  begin();
}

void BucketedAllReduce::begin() {
  pending_.assign(buckets_.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    for (int u = buckets_[b].first_unit; u <= buckets_[b].last_unit; ++u)
      if (layout_->unit_numel(u) > 0) ++pending_[b];
  requests_.clear();
  launched_.assign(buckets_.size(), false);
}

void BucketedAllReduce::on_backward_done(int unit) {
  // The MPI backend progresses a non-blocking collective only inside test()/wait(): poke the buckets in
  // flight between units so that they move while backward computes instead of all at finish().
  for (coll::Request& r : requests_)
    if (!r.done()) r.test();
  for (int blk : layout_->grads_final_after(unit)) {
    const int b = bucket_of_unit_.at(blk);
    if (--pending_[b] != 0) continue;
    const Bucket& k = buckets_[b];
    const TensorView view(static_cast<std::byte*>(grads_.data()) + k.offset * std::int64_t(dtype_size(grads_.dtype())),
                          Shape{k.numel}, grads_.dtype(), grads_.device());
    launched_[b] = true;
    if (overlap_)
      requests_.push_back(group_->start_all_reduce(view, coll::ReduceOp::sum, stream_));
    else
      group_->all_reduce(view, coll::ReduceOp::sum, stream_);
  }
}

void BucketedAllReduce::finish() {
  // On a GPU: the stream first, so that backward's compute is not charged to the buckets as a communication wait.
  if (stream_.device().is_cuda()) stream_.synchronize();
  for (coll::Request& r : requests_) r.wait();
  requests_.clear();
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    HZP_CHECK(launched_[b], "BucketedAllReduce: bucket ", b, " (units ", buckets_[b].first_unit, "..",
              buckets_[b].last_unit, ") never became ready");
}

}  // namespace hzp::schedulers
