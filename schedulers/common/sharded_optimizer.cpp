// ShardedOptimizer (common/sharded_optimizer.hpp): AdamW per piece of a parameter slice, with the global
// norm combined across the sharding group from fp64 sums of squares.
#include "hzp/schedulers/common/sharded_optimizer.hpp"

#include <cmath>
#include <cstring>
#include <numbers>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/kernels/grad_norm.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"

namespace hzp::schedulers {

using workloads::Precision;

ShardedOptimizer::ShardedOptimizer(const workloads::TrainConfig& train, std::vector<TensorView> param_pieces,
                                   CachingAllocator& alloc, const InitFn& init, StreamRef stream)
    : train_(train), pieces_(std::move(param_pieces)), alloc_(&alloc), stream_(stream) {
  const bool separate = workloads::has_separate_master(train_.precision);
  HZP_CHECK(train_.precision != Precision::fp64, "ShardedOptimizer: fp64 is the test-only precision of `none`");
  HZP_CHECK(stream.device() == alloc.device(), "ShardedOptimizer: the stream is on ", to_string(stream.device()),
            " but the allocator on ", to_string(alloc.device()));
  for (const TensorView& p : pieces_) {
    HZP_CHECK(p.dtype() == workloads::param_dtype(train_.precision) && p.device() == alloc.device(),
              "ShardedOptimizer: a piece holds ", dtype_name(p.dtype()), " on ", to_string(p.device()), " but ",
              workloads::to_string(train_.precision), " parameters are ",
              dtype_name(workloads::param_dtype(train_.precision)), " on ", to_string(alloc.device()));
    numel_ += p.numel();
  }
  m_ = zeroed_on(alloc, numel_, DType::f32, AllocationTag::adam_m, stream_);
  v_ = zeroed_on(alloc, numel_, DType::f32, AllocationTag::adam_v, stream_);
  // The initial values are host code (the counter-based initialiser): a contiguous host staging copy, then the
  // master (bf16-mixed) or, in fp32, the working pieces, which are the master.
  std::vector<float> tmp(static_cast<std::size_t>(numel_));
  if (numel_ > 0) init(tmp);
  const Device dev = alloc.device();
  if (separate) {
    master_ = alloc.allocate(static_cast<std::size_t>(numel_) * sizeof(float), AllocationTag::master);
    if (numel_ > 0) copy_bytes(master_.data(), dev, tmp.data(), Device::cpu(), tmp.size() * sizeof(float), stream_);
    std::int64_t off = 0;
    for (const TensorView& p : pieces_) {
      if (p.numel() > 0) kernels::cast(p, f32(master_, off, p.numel()), stream_);
      off += p.numel();
    }
  } else {
    std::int64_t off = 0;
    for (const TensorView& p : pieces_) {
      if (p.numel() > 0) copy_bytes(p.data(), dev, tmp.data() + off, Device::cpu(), p.bytes(), stream_);
      off += p.numel();
    }
  }
  stream_.synchronize();  // `tmp` dies here (once, at construction)
}

TensorView ShardedOptimizer::f32(const Allocation& a, std::int64_t begin, std::int64_t n) const {
  return view_at(a, DType::f32, begin, n, alloc_->device());
}

ShardedOptimizer::~ShardedOptimizer() = default;

double ShardedOptimizer::global_sum_squares(ConstTensorView grads, coll::Communicator* norm_group) const {
  HZP_CHECK(grads.numel() == numel_ && grads.dtype() == DType::f32 && grads.device() == alloc_->device(),
            "ShardedOptimizer: gradient slice of ",
            grads.numel(), " ", dtype_name(grads.dtype()), " elements on ", to_string(grads.device()), ", expected ",
            numel_, " f32 on ", to_string(alloc_->device()));
  return numel_ > 0 ? global_sum_squares(std::span<const ConstTensorView>(&grads, 1), norm_group)
                    : global_sum_squares(std::span<const ConstTensorView>{}, norm_group);
}

double ShardedOptimizer::global_sum_squares(std::span<const ConstTensorView> parts, coll::Communicator* norm_group) const {
  // The one value of the update that must reach the host (the clipping coefficient needs it): the kernel's
  // partial sums come back through mapped memory, a stream synchronisation (docs/cuda.md).
  double sq = parts.empty() ? 0.0 : kernels::grad_norm_sum_squares(parts, stream_);
  if (norm_group != nullptr && norm_group->size() > 1) {
    // fp64 so the combined sum loses nothing to the shard boundaries. A host value: a NCCL group stages it.
    norm_group->all_reduce(TensorView(&sq, Shape{1}, DType::f64), coll::ReduceOp::sum, StreamRef::host());
  }
  return sq;
}

OptimizerStepResult ShardedOptimizer::step(ConstTensorView grads, double sum_squares, std::int64_t step, double lr) {
  OptimizerStepResult r;
  r.grad_norm = kernels::grad_norm_from_sum_squares(sum_squares);
  r.clip_coefficient = kernels::grad_clip_coefficient(r.grad_norm, train_.clip);
  r.lr = lr;
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = train_.beta1;
  h.beta2 = train_.beta2;
  h.eps = train_.eps;
  h.weight_decay = train_.weight_decay;
  h.step = step + 1;
  h.grad_scale = r.clip_coefficient;
  const bool separate = workloads::has_separate_master(train_.precision);
  std::int64_t off = 0;
  for (const TensorView& p : pieces_) {
    const std::int64_t n = p.numel();
    if (n > 0) {
      const ConstTensorView g(static_cast<const float*>(grads.data()) + off, Shape{n}, DType::f32, grads.device());
      if (separate)
        kernels::adamw_step(f32(master_, off, n), f32(m_, off, n), f32(v_, off, n), g, h, p, stream_);
      else
        kernels::adamw_step(p, f32(m_, off, n), f32(v_, off, n), g, h, stream_);
    }
    off += n;
  }
  return r;
}

ConstTensorView ShardedOptimizer::master() const {
  HZP_CHECK(has_master(), "ShardedOptimizer::master: fp32 training keeps no separate master copy");
  return f32(master_, 0, numel_);
}
ConstTensorView ShardedOptimizer::m() const { return f32(m_, 0, numel_); }
ConstTensorView ShardedOptimizer::v() const { return f32(v_, 0, numel_); }

double scheduled_learning_rate(const workloads::TrainConfig& t, std::int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  if (step >= t.steps || t.steps == t.warmup_steps) return t.lr_min;
  const double x = static_cast<double>(step - t.warmup_steps) / static_cast<double>(t.steps - t.warmup_steps);
  return t.lr_min + 0.5 * (t.lr - t.lr_min) * (1.0 + std::cos(std::numbers::pi * x));
}

ShardedOptimizer::InitFn slice_initializer(const workloads::Workload& model, const ShardLayout& layout, int index,
                                           std::uint64_t seed) {
  return [&model, &layout, index, seed](std::span<float> master) {
    for (int s = 0; s < layout.num_segments(); ++s) {
      const ShardLayout::Range r = layout.valid_range(s, index);
      if (r.count > 0)
        model.init_params(layout.global_offset(s) + r.begin,
                          master.subspan(static_cast<std::size_t>(layout.slice_offset(s)), static_cast<std::size_t>(r.count)),
                          seed);
    }
  };
}

}  // namespace hzp::schedulers
