// ShardedOptimizer (common/sharded_optimizer.hpp): AdamW per piece of a parameter slice, with the global
// norm combined across the sharding group from fp64 sums of squares.
#include "hzp/schedulers/common/sharded_optimizer.hpp"

#include <cmath>
#include <cstring>
#include <numbers>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/kernels/grad_norm.hpp"

namespace hzp::schedulers {

using workloads::Precision;

namespace {

Allocation zeroed(CachingAllocator& a, std::int64_t n, AllocationTag tag) {
  Allocation r = a.allocate(static_cast<std::size_t>(n) * sizeof(float), tag);
  if (r) std::memset(r.data(), 0, static_cast<std::size_t>(n) * sizeof(float));
  return r;
}

TensorView f32(const Allocation& a, std::int64_t begin, std::int64_t n) {
  return TensorView(a.data_as<float>() + begin, Shape{n}, DType::f32);
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const workloads::TrainConfig& train, std::vector<TensorView> param_pieces,
                                   CachingAllocator& alloc, const InitFn& init)
    : train_(train), pieces_(std::move(param_pieces)), alloc_(&alloc) {
  const bool separate = workloads::has_separate_master(train_.precision);
  HZP_CHECK(train_.precision != Precision::fp64, "ShardedOptimizer: fp64 is the test-only precision of `none`");
  for (const TensorView& p : pieces_) {
    HZP_CHECK(p.dtype() == workloads::param_dtype(train_.precision), "ShardedOptimizer: a piece holds ",
              dtype_name(p.dtype()), " but ", workloads::to_string(train_.precision), " parameters are ",
              dtype_name(workloads::param_dtype(train_.precision)));
    numel_ += p.numel();
  }
  m_ = zeroed(alloc, numel_, AllocationTag::adam_m);
  v_ = zeroed(alloc, numel_, AllocationTag::adam_v);
  if (separate) {
    master_ = zeroed(alloc, numel_, AllocationTag::master);
    if (numel_ > 0) init(std::span<float>(master_.data_as<float>(), static_cast<std::size_t>(numel_)));
    std::int64_t off = 0;
    for (const TensorView& p : pieces_) {
      if (p.numel() > 0) kernels::cast(p, f32(master_, off, p.numel()), StreamRef::host());
      off += p.numel();
    }
  } else {
    // fp32: the working pieces are the master; initialise through a contiguous staging copy.
    std::vector<float> tmp(static_cast<std::size_t>(numel_));
    if (numel_ > 0) init(tmp);
    std::int64_t off = 0;
    for (const TensorView& p : pieces_) {
      if (p.numel() > 0) std::memcpy(p.data(), tmp.data() + off, p.bytes());
      off += p.numel();
    }
  }
}

ShardedOptimizer::~ShardedOptimizer() = default;

double ShardedOptimizer::global_sum_squares(ConstTensorView grads, coll::Communicator* norm_group) const {
  HZP_CHECK(grads.numel() == numel_ && grads.dtype() == DType::f32, "ShardedOptimizer: gradient slice of ",
            grads.numel(), " ", dtype_name(grads.dtype()), " elements, expected ", numel_, " f32");
  return numel_ > 0 ? global_sum_squares(std::span<const ConstTensorView>(&grads, 1), norm_group)
                    : global_sum_squares(std::span<const ConstTensorView>{}, norm_group);
}

double ShardedOptimizer::global_sum_squares(std::span<const ConstTensorView> parts, coll::Communicator* norm_group) const {
  double sq = parts.empty() ? 0.0 : kernels::grad_norm_sum_squares(parts, StreamRef::host());
  if (norm_group != nullptr && norm_group->size() > 1) {
    // fp64 so the combined sum loses nothing to the shard boundaries.
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
      const ConstTensorView g(static_cast<const float*>(grads.data()) + off, Shape{n}, DType::f32);
      if (separate)
        kernels::adamw_step(f32(master_, off, n), f32(m_, off, n), f32(v_, off, n), g, h, p, StreamRef::host());
      else
        kernels::adamw_step(p, f32(m_, off, n), f32(v_, off, n), g, h, StreamRef::host());
    }
    off += n;
  }
  return r;
}

ConstTensorView ShardedOptimizer::master() const {
  HZP_CHECK(has_master(), "ShardedOptimizer::master: fp32 training keeps no separate master copy");
  return ConstTensorView(master_.data(), Shape{numel_}, DType::f32);
}
ConstTensorView ShardedOptimizer::m() const { return ConstTensorView(m_.data(), Shape{numel_}, DType::f32); }
ConstTensorView ShardedOptimizer::v() const { return ConstTensorView(v_.data(), Shape{numel_}, DType::f32); }

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
