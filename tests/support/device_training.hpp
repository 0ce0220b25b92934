// A single-device training loop on a CUDA stream, for the GPU tests and the GPU step benchmark while
// the `none` scheduler still keeps its buffers on the host: flat parameter (bf16 working copy plus fp32
// master in bf16-mixed), gradient and Adam buffers in device memory from the given allocator, micro-
// batches through Workload::forward/backward on the stream, then the global norm, the clipping
// coefficient and the fused AdamW kernel, with NoneScheduler's learning-rate schedule. It follows
// none's step (schedulers/none/none_scheduler.cpp) operation for operation so the two can be compared.
#pragma once

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/adamw.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/kernels/grad_norm.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/workloads/batch_plan.hpp"
#include "hzp/workloads/data_source.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::test {

class DeviceTraining {
 public:
  DeviceTraining(const workloads::Workload& model, const workloads::TrainConfig& train, CachingAllocator& alloc,
                 StreamRef stream)
      : model_(model), train_(train), alloc_(alloc), stream_(stream), n_(model.layout().total_numel()) {
    const workloads::Precision p = train.precision;
    std::vector<float> init(static_cast<std::size_t>(n_));
    model.init_params(0, std::span<float>(init), train.seed);
    master_ = alloc.allocate(bytes(DType::f32), AllocationTag::master);
    copy_bytes(master_.data(), alloc.device(), init.data(), Device::cpu(), bytes(DType::f32), stream);
    if (workloads::has_separate_master(p)) {
      params_ = alloc.allocate(bytes(DType::bf16), AllocationTag::param);
      kernels::cast(params_view(), master_view(), stream);
    }
    for (auto [a, tag] : {std::pair{&grads_, AllocationTag::grad}, {&m_, AllocationTag::adam_m},
                          {&v_, AllocationTag::adam_v}}) {
      *a = alloc.allocate(bytes(DType::f32), tag);
      zero_bytes(a->data(), bytes(DType::f32), stream);
    }
    ctx_ = model.make_context(alloc, {.micro_batch_size = train.micro_batch_size, .recompute = train.recompute,
                                      .stream = stream});
    const auto tokens = static_cast<std::size_t>(train.micro_batch_size * model.seq_len());
    inputs_.resize(tokens);
    targets_.resize(tokens);
    stream.synchronize();  // `init` dies here
  }

  /// One optimizer step; returns the step's mean loss (the sum of the micro-batch shares).
  double step(const workloads::DataSource& src, std::int64_t step) {
    const workloads::ParamLayout& layout = model_.layout();
    const int units = layout.num_units();
    const workloads::BatchPlan plan(train_.global_batch, train_.micro_batch_size, 1);
    const double normaliser = static_cast<double>(train_.global_batch * model_.seq_len());
    double loss = 0;
    for (std::int64_t j = 0; j < plan.micro_batches_per_step(); ++j) {
      workloads::fill_micro_batch(src, plan, step, j, inputs_, targets_);
      ctx_->begin(inputs_, targets_, normaliser);
      for (int u = 0; u < units; ++u) model_.forward(u, workloads::unit_params_from_flat(layout, u, params_view()), *ctx_);
      loss += ctx_->loss();
      for (int u = units - 1; u >= 0; --u)
        model_.backward(u, workloads::unit_params_from_flat(layout, u, params_view()), *ctx_,
                        workloads::unit_grads_from_flat(layout, u, grads_view(), j == 0));
    }
    const ConstTensorView g = grads_view();
    const double norm = kernels::grad_norm_from_sum_squares(kernels::grad_norm_sum_squares({&g, 1}, stream_));
    kernels::AdamWHyper h;
    h.lr = schedulers::NoneScheduler::learning_rate(train_, step);
    h.beta1 = train_.beta1;
    h.beta2 = train_.beta2;
    h.eps = train_.eps;
    h.weight_decay = train_.weight_decay;
    h.step = step + 1;
    h.grad_scale = kernels::grad_clip_coefficient(norm, train_.clip);
    if (workloads::has_separate_master(train_.precision))
      kernels::adamw_step(master_view(), view(m_, DType::f32), view(v_, DType::f32), g, h, params_view(), stream_);
    else
      kernels::adamw_step(master_view(), view(m_, DType::f32), view(v_, DType::f32), g, h, stream_);
    return loss;
  }

  TensorView grads_view() const { return view(grads_, DType::f32); }
  TensorView master_view() const { return view(master_, DType::f32); }
  TensorView params_view() const {
    return workloads::has_separate_master(train_.precision) ? view(params_, DType::bf16) : master_view();
  }
  std::int64_t numel() const { return n_; }

 private:
  std::size_t bytes(DType t) const { return static_cast<std::size_t>(n_) * dtype_size(t); }
  TensorView view(const Allocation& a, DType t) const { return TensorView(a.data(), Shape{n_}, t, alloc_.device()); }

  const workloads::Workload& model_;
  workloads::TrainConfig train_;
  CachingAllocator& alloc_;
  StreamRef stream_;
  std::int64_t n_;
  Allocation master_, params_, grads_, m_, v_;
  std::unique_ptr<workloads::MicroBatchContext> ctx_;
  std::vector<std::int32_t> inputs_, targets_;
};

}  // namespace hzp::test
