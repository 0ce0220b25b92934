// The model-independent half of the workload interface (workload.hpp, precision.hpp): block lists for
// a call, the micro-batch order check every model gets for free, and the flat-buffer conveniences.
#include "hzp/workloads/workload.hpp"

#include "hzp/core/cuda_backing.hpp"

#include <algorithm>

#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"

namespace hzp::workloads {

std::string_view to_string(Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16_mixed: return "bf16-mixed";
    case Precision::fp64: return "fp64";
  }
  return "?";
}

Precision parse_precision(std::string_view text) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed, Precision::fp64})
    if (to_string(p) == text) return p;
  HZP_THROW(ConfigError, "train.precision = \"", text, "\" is not one of: fp32, bf16-mixed, fp64 (fp64 is for tests)");
}

// ---------------------------------------------------------------------------------------------------
// Block lists
// ---------------------------------------------------------------------------------------------------

UnitParams& UnitParams::set(int unit, ConstTensorView block) {
  for (Entry& e : entries_)
    if (e.unit == unit) {
      e.view = block;
      return *this;
    }
  entries_.push_back({unit, block});
  return *this;
}

bool UnitParams::has(int unit) const noexcept {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.unit == unit; });
}

ConstTensorView UnitParams::block(int unit) const {
  for (const Entry& e : entries_)
    if (e.unit == unit) return e.view;
  HZP_THROW(PreconditionError, "the parameters of unit ", unit, " were not provided to this call");
}

UnitGrads& UnitGrads::set(int unit, TensorView block, bool accumulate) {
  for (Entry& e : entries_)
    if (e.unit == unit) {
      e.block = {block, accumulate};
      return *this;
    }
  entries_.push_back({unit, {block, accumulate}});
  return *this;
}

bool UnitGrads::has(int unit) const noexcept {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.unit == unit; });
}

const UnitGrads::Block& UnitGrads::block(int unit) const {
  for (const Entry& e : entries_)
    if (e.unit == unit) return e.block;
  HZP_THROW(PreconditionError, "the gradient block of unit ", unit, " was not provided to this call");
}

// ---------------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------------

MicroBatchContext::MicroBatchContext(CachingAllocator& allocator, const ContextOptions& options,
                                     std::int64_t seq_len, int num_units)
    : allocator_(&allocator), options_(options), seq_len_(seq_len), num_units_(num_units) {
  HZP_CHECK(options.micro_batch_size > 0, "micro_batch_size = ", options.micro_batch_size, " must be positive");
  HZP_CHECK(allocator.device() == options.stream.device(), "a context on ", to_string(options.stream.device()),
            " needs an allocator of that device, got one of ", to_string(allocator.device()));
}

MicroBatchContext::~MicroBatchContext() = default;

void MicroBatchContext::begin(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets,
                              double normaliser) {
  const auto n = static_cast<std::size_t>(tokens());
  HZP_CHECK(inputs.size() == n && targets.size() == n, "micro-batch of ", options_.micro_batch_size, " x ",
            seq_len_, " = ", n, " tokens, got ", inputs.size(), " inputs and ", targets.size(), " targets");
  HZP_CHECK(normaliser > 0, "loss normaliser = ", normaliser, " must be positive (global target tokens)");
  release_all();
  inputs_ = inputs;
  targets_ = targets;
  if (options_.stream.device().is_cuda()) {
    const std::size_t bytes = n * sizeof(std::int32_t);
    if (!device_tokens_) device_tokens_ = allocator_->allocate(2 * bytes, AllocationTag::activation);
    const Device dev = options_.stream.device();
    copy_bytes(device_tokens_.data(), dev, inputs.data(), Device::cpu(), bytes, options_.stream);
    copy_bytes(device_tokens_.data_as<std::int32_t>() + n, dev, targets.data(), Device::cpu(), bytes, options_.stream);
  }
  normaliser_ = normaliser;
  loss_sum_ = 0;
  forwards_done_ = 0;
  next_backward_ = num_units_ - 1;
}

ConstTensorView MicroBatchContext::input_tokens() const {
  const Shape shape{tokens()};
  if (options_.stream.device().is_cpu()) return ConstTensorView(inputs_.data(), shape, DType::i32);
  return ConstTensorView(device_tokens_.data(), shape, DType::i32, options_.stream.device());
}

ConstTensorView MicroBatchContext::target_tokens() const {
  const Shape shape{tokens()};
  if (options_.stream.device().is_cpu()) return ConstTensorView(targets_.data(), shape, DType::i32);
  return ConstTensorView(device_tokens_.data_as<std::int32_t>() + tokens(), shape, DType::i32,
                         options_.stream.device());
}

double MicroBatchContext::loss_sum() const {
  HZP_CHECK(forwards_done_ == num_units_, "the loss exists after the last unit's forward; ", forwards_done_,
            " of ", num_units_, " forwards have run");
  return loss_sum_;
}

// ---------------------------------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------------------------------

Workload::Workload(ParamLayout layout, Precision precision, std::int64_t seq_len, std::int64_t vocab)
    : layout_(std::move(layout)), precision_(precision), seq_len_(seq_len), vocab_(vocab) {}

std::unique_ptr<MicroBatchContext> Workload::make_context(CachingAllocator& allocator,
                                                          const ContextOptions& options) const {
  return new_context(allocator, options);
}

void Workload::check_blocks(int unit, const UnitParams& params, const UnitGrads* grads) const {
  const DType pd = param_dtype(precision_), gd = grad_dtype(precision_);
  for (int b : layout_.param_blocks(unit)) {
    const ConstTensorView v = params.block(b);
    HZP_CHECK(v.dtype() == pd && v.numel() == layout_.unit_numel(b), "unit ", layout_.unit(unit).name,
              ": parameter block of unit ", layout_.unit(b).name, " is ", dtype_name(v.dtype()), " [", v.numel(),
              "], expected ", dtype_name(pd), " [", layout_.unit_numel(b), "]");
    if (grads) {
      const TensorView g = grads->block(b).view;
      HZP_CHECK(g.dtype() == gd && g.numel() == layout_.unit_numel(b), "unit ", layout_.unit(unit).name,
                ": gradient block of unit ", layout_.unit(b).name, " is ", dtype_name(g.dtype()), " [",
                g.numel(), "], expected ", dtype_name(gd), " [", layout_.unit_numel(b), "]");
    }
  }
}

void Workload::forward(int unit, const UnitParams& params, MicroBatchContext& ctx) const {
  HZP_CHECK(ctx.forwards_done_ >= 0, "forward(", unit, ") before begin() of a micro-batch");
  HZP_CHECK(unit == ctx.forwards_done_, "forward(", unit, ") out of order: expected forward(",
            ctx.forwards_done_, ") (units run 0..", layout_.num_units() - 1, " forward)");
  check_blocks(unit, params, nullptr);
  // Timed here, for every model, so that the harness can split a step into compute and the rest.
  const profile::ScopedPhase phase(profile::Phase::forward, layout_.unit(unit).name);
  forward_unit(unit, params, ctx);
  ++ctx.forwards_done_;
}

void Workload::backward(int unit, const UnitParams& params, MicroBatchContext& ctx, const UnitGrads& grads) const {
  HZP_CHECK(ctx.forwards_done_ == layout_.num_units(), "backward(", unit, ") before the forward pass finished (",
            ctx.forwards_done_, " of ", layout_.num_units(), " forwards run)");
  HZP_CHECK(unit == ctx.next_backward_, "backward(", unit, ") out of order: expected backward(",
            ctx.next_backward_, ") (units run ", layout_.num_units() - 1, "..0 backward)");
  check_blocks(unit, params, &grads);
  const profile::ScopedPhase phase(profile::Phase::backward, layout_.unit(unit).name);
  backward_unit(unit, params, ctx, grads);
  --ctx.next_backward_;
}

UnitParams unit_params_from_flat(const ParamLayout& layout, int unit, ConstTensorView flat) {
  UnitParams p;
  for (int b : layout.param_blocks(unit)) p.set(b, unit_block(layout, b, flat));
  return p;
}

UnitGrads unit_grads_from_flat(const ParamLayout& layout, int unit, TensorView flat, bool fresh) {
  UnitGrads g;
  for (int b : layout.grad_blocks(unit))
    g.set(b, unit_block(layout, b, flat), !(fresh && layout.first_grad_writer(b) == unit));
  return g;
}

}  // namespace hzp::workloads
