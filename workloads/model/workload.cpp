// The model-independent half of the workload interface (workload.hpp, precision.hpp): block lists for
// a call, the micro-batch order check every model gets for free, and the flat-buffer conveniences.
#include "hzp/workloads/workload.hpp"

#include "hzp/core/cuda_backing.hpp"

#include <algorithm>

#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"

namespace hzp::workloads {

std::string_view to_string(Precision p) noexcept { return name_of(kPrecisionNames, p); }

Precision parse_precision(std::string_view text) {
  if (const auto p = value_of(kPrecisionNames, text)) return *p;
  HZP_THROW(ConfigError, "train.precision = \"", text, "\" is not one of: ", names_text(kPrecisionNames),
            " (fp64 is for tests)");
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
    : allocator_(&allocator), options_(options), seq_len_(seq_len), num_units_(num_units),
      first_unit_(options.first_unit), end_unit_(options.end_unit < 0 ? num_units : options.end_unit) {
  HZP_CHECK(options.micro_batch_size > 0, "micro_batch_size = ", options.micro_batch_size, " must be positive");
  HZP_CHECK(first_unit_ >= 0 && first_unit_ < end_unit_ && end_unit_ <= num_units, "a context's unit range [",
            options.first_unit, ", ", options.end_unit, ") must be a non-empty part of the model's [0, ", num_units,
            ")");
  HZP_CHECK(allocator.device() == options.stream.device(), "a context on ", to_string(options.stream.device()),
            " needs an allocator of that device, got one of ", to_string(allocator.device()));
  // The keeper's completion synchronises its own stream: one of another stream would let it pass requests whose
  // stream has not reached them.
  HZP_CHECK(options.requests == nullptr || options.requests->stream() == options.stream, "a context on ",
            to_string(options.stream.device()), " was given a request keeper on another stream (",
            to_string(options.requests->stream().device()), "); give it the keeper of its own compute stream");
}

MicroBatchContext::~MicroBatchContext() = default;

void MicroBatchContext::begin(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets,
                              double normaliser, std::span<const std::int32_t> document_first) {
  const auto n = static_cast<std::size_t>(tokens());
  // A stage that runs neither the embedding nor the head may be given no tokens.
  const bool need_inputs = first_unit_ == 0, need_targets = end_unit_ == num_units_;
  HZP_CHECK((inputs.size() == n || (!need_inputs && inputs.empty())) &&
                (targets.size() == n || (!need_targets && targets.empty())),
            "micro-batch of ", options_.micro_batch_size, " x ", seq_len_, " = ", n, " tokens, got ", inputs.size(),
            " inputs and ", targets.size(), " targets");
  HZP_CHECK(normaliser > 0, "loss normaliser = ", normaliser, " must be positive (global target tokens)");
  HZP_CHECK(document_first.empty() || document_first.size() == n, "document_first holds ", document_first.size(),
            " positions; a micro-batch of ", options_.micro_batch_size, " x ", seq_len_, " needs ", n,
            " (or none: one document per sequence)");
  release_all();
  inputs_ = inputs;
  targets_ = targets;
  document_first_ = document_first;
  if (options_.stream.device().is_cuda()) {
    const std::size_t bytes = n * sizeof(std::int32_t);
    if (!device_tokens_) device_tokens_ = allocator_->allocate(2 * bytes, AllocationTag::activation);
    const Device dev = options_.stream.device();
    if (!inputs.empty()) copy_bytes(device_tokens_.data(), dev, inputs.data(), Device::cpu(), bytes, options_.stream);
    if (!targets.empty())
      copy_bytes(device_tokens_.data_as<std::int32_t>() + n, dev, targets.data(), Device::cpu(), bytes,
                 options_.stream);
    if (!document_first.empty()) {
      if (!device_first_) device_first_ = allocator_->allocate(bytes, AllocationTag::activation);
      copy_bytes(device_first_.data(), dev, document_first.data(), Device::cpu(), bytes, options_.stream);
    }
  }
  normaliser_ = normaliser;
  loss_sum_ = 0;
  forwards_done_ = first_unit_;
  next_backward_ = end_unit_ - 1;
  input_given_ = output_grad_given_ = output_kept_ = false;
}

TensorView MicroBatchContext::input_slot() {
  HZP_CHECK(first_unit_ > 0, "input_slot(): this context starts at unit 0, whose input is the tokens");
  HZP_CHECK(forwards_done_ == first_unit_ && !input_given_, "input_slot(): the input of units [", first_unit_, ", ",
            end_unit_, ") is taken once per micro-batch, after begin() and before forward(", first_unit_, ")");
  input_given_ = true;
  return allocate_boundary(false);
}

ConstTensorView MicroBatchContext::output() const {
  HZP_CHECK(end_unit_ < num_units_, "output(): this context ends at the last unit, whose output is the loss");
  HZP_CHECK(forwards_done_ == end_unit_ && !output_grad_given_, "output(): the output of units [", first_unit_, ", ",
            end_unit_, ") is held from forward(", end_unit_ - 1, ") until output_grad_slot()");
  return boundary(false);
}

TensorView MicroBatchContext::output_grad_slot() { return take_output_grad_slot(false); }

TensorView MicroBatchContext::output_grad_slot_keeping_output() { return take_output_grad_slot(true); }

TensorView MicroBatchContext::take_output_grad_slot(bool keep_output) {
  const char* call = keep_output ? "output_grad_slot_keeping_output()" : "output_grad_slot()";
  HZP_CHECK(end_unit_ < num_units_, call, ": this context ends at the last unit, whose backward starts from the loss");
  HZP_CHECK(forwards_done_ == end_unit_ && next_backward_ == end_unit_ - 1 && !output_grad_given_, call,
            ": the gradient of the output of units [", first_unit_, ", ", end_unit_, ") is taken once, after forward(",
            end_unit_ - 1, ") and before backward(", end_unit_ - 1, ")");
  output_grad_given_ = true;
  output_kept_ = keep_output;  // then freed when the first backward starts (Workload::backward)
  if (!keep_output) drop_boundary(false);
  return allocate_boundary(true);
}

ConstTensorView MicroBatchContext::input_grad() const {
  HZP_CHECK(first_unit_ > 0, "input_grad(): this context starts at unit 0, whose input (the tokens) has no gradient");
  HZP_CHECK(next_backward_ == first_unit_ - 1, "input_grad(): the gradient of the input of units [", first_unit_,
            ", ", end_unit_, ") exists after backward(", first_unit_, ")");
  return boundary(true);
}

ConstTensorView MicroBatchContext::input_tokens() const {
  const Shape shape{tokens()};
  if (options_.stream.device().is_cpu()) return ConstTensorView(inputs_.data(), shape, DType::i32);
  return ConstTensorView(device_tokens_.data(), shape, DType::i32, options_.stream.device());
}

std::span<const std::int32_t> MicroBatchContext::stream_document_first() const noexcept {
  if (options_.stream.device().is_cpu() || document_first_.empty()) return document_first_;
  return {device_first_.data_as<std::int32_t>(), document_first_.size()};
}

ConstTensorView MicroBatchContext::target_tokens() const {
  const Shape shape{tokens()};
  if (options_.stream.device().is_cpu()) return ConstTensorView(targets_.data(), shape, DType::i32);
  return ConstTensorView(device_tokens_.data_as<std::int32_t>() + tokens(), shape, DType::i32,
                         options_.stream.device());
}

double MicroBatchContext::loss_sum() const {
  HZP_CHECK(end_unit_ == num_units_, "the loss is computed by the last unit (", num_units_ - 1,
            "), which this context over units [", first_unit_, ", ", end_unit_, ") does not run");
  HZP_CHECK(forwards_done_ == num_units_, "the loss exists after the last unit's forward; ",
            (forwards_done_ < 0 ? 0 : forwards_done_ - first_unit_), " of ", num_units_ - first_unit_, " forwards have run");
  return loss_sum_;
}

// ---------------------------------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------------------------------

Workload::Workload(ParamLayout layout, Precision precision, std::int64_t seq_len, std::int64_t vocab)
    : layout_(std::move(layout)), precision_(precision), seq_len_(seq_len), vocab_(vocab) {}

void Workload::restore_checkpoint_state(std::span<const double> state) const {
  if (!state.empty())
    HZP_THROW(DataError, "model.state holds ", state.size(), " numbers but this model (", describe(),
              ") keeps no state beside its parameters (a checkpoint of another model)");
}

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
  HZP_CHECK(unit == ctx.forwards_done_ && unit < ctx.end_unit_, "forward(", unit, ") out of order: expected ",
            ctx.forwards_done_ < ctx.end_unit_ ? "forward(" + std::to_string(ctx.forwards_done_) + ")"
                                               : std::string("backward or begin()"),
            " (this context runs units ", ctx.first_unit_, "..", ctx.end_unit_ - 1, " forward)");
  HZP_CHECK(unit > 0 && unit == ctx.first_unit_ ? ctx.input_given_ : true, "forward(", unit,
            ") starts a stage: fill input_slot() with the previous stage's output first");
  check_blocks(unit, params, nullptr);
  // Timed here, for every model, so that the harness can split a step into compute and the rest.
  const profile::ScopedPhase phase(profile::Phase::forward, layout_.unit(unit).name);
  forward_unit(unit, params, ctx);
  ++ctx.forwards_done_;
}

void Workload::backward(int unit, const UnitParams& params, MicroBatchContext& ctx, const UnitGrads& grads) const {
  HZP_CHECK(ctx.forwards_done_ == ctx.end_unit_, "backward(", unit, ") before the forward pass finished (",
            (ctx.forwards_done_ < 0 ? 0 : ctx.forwards_done_ - ctx.first_unit_), " of ", ctx.end_unit_ - ctx.first_unit_,
            " forwards run)");
  HZP_CHECK(unit == ctx.next_backward_ && unit >= ctx.first_unit_, "backward(", unit, ") out of order: expected ",
            ctx.next_backward_ >= ctx.first_unit_ ? "backward(" + std::to_string(ctx.next_backward_) + ")"
                                                  : std::string("begin()"),
            " (this context runs units ", ctx.end_unit_ - 1, "..", ctx.first_unit_, " backward)");
  HZP_CHECK(unit + 1 < layout_.num_units() && unit + 1 == ctx.end_unit_ ? ctx.output_grad_given_ : true, "backward(",
            unit, ") ends a stage: fill output_grad_slot() with the gradient of its output first");
  check_blocks(unit, params, &grads);
  if (ctx.output_kept_) {  // the stage's output is not read again: its send completed (the caller's contract)
    ctx.drop_boundary(false);
    ctx.output_kept_ = false;
  }
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
