// FixedPointGrads (common/fixed_point_grads.hpp): per-tensor exponents, the attempt tally and its
// verdict, and the exact global sum of squares.
#include "hzp/schedulers/common/fixed_point_grads.hpp"

#include <bit>
#include <cmath>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/fixed_point.hpp"

namespace hzp::schedulers {
namespace {

template <typename View>
View range(const View& v, std::int64_t offset, std::int64_t n) {
  auto* base = static_cast<std::conditional_t<std::is_same_v<View, TensorView>, std::byte*, const std::byte*>>(v.data());
  return View(base + offset * static_cast<std::int64_t>(dtype_size(v.dtype())), Shape{n}, v.dtype(), v.device());
}

}  // namespace

FixedPointGrads::FixedPointGrads(const workloads::ParamLayout& layout, std::int64_t micro_batches, FixedPointPolicy policy)
    : layout_(&layout), policy_(policy) {
  HZP_CHECK(micro_batches >= 1, "FixedPointGrads: ", micro_batches, " micro-batches per step");
  HZP_CHECK(policy.step0_exponent >= kernels::kFixedMinExponent && policy.step0_exponent <= kernels::kFixedMaxExponent &&
                policy.headroom_bits >= 0 && policy.max_retries >= 0,
            "FixedPointGrads: policy step0_exponent = ", policy.step0_exponent, ", headroom_bits = ",
            policy.headroom_bits, ", max_retries = ", policy.max_retries);
  limit_ = static_cast<std::int64_t>((std::uint64_t{1} << 63) - 1) / micro_batches;
  log2_limit_ = std::bit_width(static_cast<std::uint64_t>(limit_)) - 1;
  int tensors = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    first_tensor_.push_back(tensors);
    // A pipeline stage's absent units keep their slots: every rank's tally lines up with the whole model's tensors.
    const workloads::Unit& x = layout.unit(u);
    const int slots = static_cast<int>(x.tensors.size()) + x.absent_tensors;
    tensors += slots;
    halved_.insert(halved_.end(), static_cast<std::size_t>(slots), x.shared ? 1 : 0);
    model_numel_ += x.numel + x.absent_numel;
  }
  exponents_.assign(static_cast<std::size_t>(tensors), policy.step0_exponent);
  max_abs_.assign(exponents_.size(), 0.0);
  accepted_max_.assign(exponents_.size(), 0.0);
}

void FixedPointGrads::begin_attempt(std::int64_t step) {
  if (step != step_) {
    if (have_accepted_)
      for (std::size_t i = 0; i < exponents_.size(); ++i) exponents_[i] = exponent_for(accepted_max_[i], exponents_[i], i);
    have_accepted_ = false;
    step_ = step;
    retries_ = 0;
  }
  std::fill(max_abs_.begin(), max_abs_.end(), 0.0);
  over_ = 0;
  non_finite_ = 0;
}

void FixedPointGrads::to_fixed(int unit, ConstTensorView grad, TensorView q, bool accumulate) {
  const std::int64_t n = layout_->unit_numel(unit);
  HZP_CHECK(grad.numel() == n && q.numel() == n && grad.dtype() == DType::f32 && q.dtype() == DType::i64,
            "FixedPointGrads::to_fixed of unit ", unit, ": grad ", grad.numel(), " ", dtype_name(grad.dtype()), ", q ",
            q.numel(), " ", dtype_name(q.dtype()), ", unit holds ", n, " (fp32 -> int64)");
  convert_tallied(unit, 0, grad, q, accumulate);
}

void FixedPointGrads::convert_tallied(int unit, std::int64_t begin, ConstTensorView grad, TensorView q, bool accumulate) {
  for_each_tensor(unit, begin, q.numel(), [&](int t, std::int64_t off, std::int64_t len) {
    const kernels::FixedTally tally = kernels::fixed_from_float(range(q, off, len), range(grad, off, len),
                                                                exponents_[static_cast<std::size_t>(t)],
                                                                limit_of(static_cast<std::size_t>(t)),
                                                                accumulate, StreamRef::host());
    double& m = max_abs_[static_cast<std::size_t>(t)];
    m = std::max(m, tally.max_abs);
    over_ += tally.over_limit;
    non_finite_ += tally.non_finite;
  });
}

void FixedPointGrads::to_fixed_at(int unit, std::int64_t begin, ConstTensorView grad, TensorView q) {
  HZP_CHECK(grad.numel() == q.numel() && grad.dtype() == DType::f32 && q.dtype() == DType::i64 && begin >= 0 &&
                begin + q.numel() <= layout_->unit_numel(unit),
            "FixedPointGrads::to_fixed_at of unit ", unit, ": elements [", begin, ", ", begin + q.numel(), ") of ",
            layout_->unit_numel(unit), ", grad ", dtype_name(grad.dtype()), ", q ", dtype_name(q.dtype()));
  convert_tallied(unit, begin, grad, q, false);
}

void FixedPointGrads::to_float(int unit, std::int64_t begin, ConstTensorView q, TensorView out) const {
  HZP_CHECK(q.numel() == out.numel() && q.dtype() == DType::i64 && out.dtype() == DType::f32 && begin >= 0 &&
                begin + q.numel() <= layout_->unit_numel(unit),
            "FixedPointGrads::to_float of unit ", unit, ": elements [", begin, ", ", begin + q.numel(), ") of ",
            layout_->unit_numel(unit), ", q ", dtype_name(q.dtype()), ", out ", out.numel(), " ",
            dtype_name(out.dtype()));
  for_each_tensor(unit, begin, q.numel(), [&](int t, std::int64_t off, std::int64_t len) {
    kernels::float_from_fixed(range(out, off, len), range(q, off, len), exponents_[static_cast<std::size_t>(t)],
                              StreamRef::host());
  });
}

void FixedPointGrads::to_float_at(std::int64_t global_begin, ConstTensorView q, TensorView out) const {
  HZP_CHECK(q.numel() == out.numel() && global_begin >= 0 && global_begin + q.numel() <= layout_->total_numel(),
            "FixedPointGrads::to_float_at: elements [", global_begin, ", ", global_begin + q.numel(), ") of ",
            layout_->total_numel());
  std::int64_t done = 0;
  while (done < q.numel()) {
    const workloads::ParamLayout::Location loc = layout_->locate(global_begin + done);
    const std::int64_t in_unit = global_begin + done - layout_->unit_offset(loc.unit);
    const std::int64_t n = std::min(q.numel() - done, layout_->unit_numel(loc.unit) - in_unit);
    to_float(loc.unit, in_unit, range(q, done, n), range(out, done, n));
    done += n;
  }
}

std::vector<double> FixedPointGrads::tally() const {
  std::vector<double> v = max_abs_;
  v.push_back(static_cast<double>(over_));
  v.push_back(static_cast<double>(non_finite_));
  return v;
}

int FixedPointGrads::exponent_for(double max_abs, int current, std::size_t tensor) const {
  if (!(max_abs > 0)) return current;
  int k = 0;
  (void)std::frexp(max_abs, &k);  // max_abs = f·2^k, f in [0.5, 1): max_abs < 2^k
  return std::clamp(log2_limit_ - halved_[tensor] - policy_.headroom_bits - k, kernels::kFixedMinExponent, kernels::kFixedMaxExponent);
}

bool FixedPointGrads::conclude(std::span<const double> global) {
  HZP_CHECK(global.size() == tally_size(), "FixedPointGrads::conclude: a tally of ", global.size(), " values, expected ",
            tally_size());
  const std::int64_t step = step_;
  const std::size_t t = exponents_.size();
  if (global[t + 1] > 0)
    HZP_THROW(PreconditionError, "deterministic mode (train.deterministic = true): step ", step,
              ": a micro-batch gradient holds NaN or inf, which 64-bit fixed point cannot represent; the run has "
              "diverged (lower train.lr or enable train.clip)");
  if (global[t] > 0) {
    if (retries_ >= policy_.max_retries)
      HZP_THROW(PreconditionError, "deterministic mode: step ", step, " still overflows 2^63/M after ", retries_,
                " retries with larger fixed-point scales");
    ++retries_;
    for (std::size_t i = 0; i < t; ++i) exponents_[i] = exponent_for(global[i], exponents_[i], i);
    return false;
  }
  std::copy(global.begin(), global.begin() + static_cast<std::ptrdiff_t>(t), accepted_max_.begin());
  have_accepted_ = true;
  return true;
}

int FixedPointGrads::square_exponent() const {
  const int e_min = *std::min_element(exponents_.begin(), exponents_.end());
  const auto n = static_cast<std::uint64_t>(std::max<std::int64_t>(model_numel_, 1));
  return 1 + 2 * e_min - static_cast<int>(std::bit_width(n - 1));
}

double FixedPointGrads::global_sum_squares(ConstTensorView grads, coll::Communicator* group) const {
  const int s = square_exponent();
  const uint128 local = grads.numel() > 0 ? kernels::fixed_sum_squares(grads, s, StreamRef::host()) : 0;
  return std::ldexp(static_cast<double>(all_reduce_uint128(group, local)), -s);
}

double FixedPointGrads::global_sum_squares(std::span<const ConstTensorView> parts, coll::Communicator* group) const {
  const int s = square_exponent();
  uint128 local = 0;  // exact: the order of the parts cannot change it
  for (const ConstTensorView& p : parts)
    if (p.numel() > 0) local += kernels::fixed_sum_squares(p, s, StreamRef::host());
  return std::ldexp(static_cast<double>(all_reduce_uint128(group, local)), -s);
}

uint128 all_reduce_uint128(coll::Communicator* group, uint128 local) {
  if (group == nullptr || group->size() <= 1) return local;
  std::int64_t limbs[4];
  for (int k = 0; k < 4; ++k) limbs[k] = static_cast<std::int64_t>((local >> (32 * k)) & 0xffffffffu);
  group->all_reduce(TensorView(limbs, Shape{4}, DType::i64), coll::ReduceOp::sum, StreamRef::host());
  uint128 total = 0;
  for (int k = 0; k < 4; ++k) total += static_cast<uint128>(static_cast<std::uint64_t>(limbs[k])) << (32 * k);
  return total;
}

}  // namespace hzp::schedulers
