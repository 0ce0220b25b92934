// FixedPointGrads: the gradient side of deterministic mode (train.deterministic, docs/deterministic.md).
// Each micro-batch's fp32 gradient is converted to int64 with one power-of-two scale per parameter tensor,
// summed as integers (exact, so the order of micro-batches, ranks and shards cannot matter), and converted
// back once. This class holds the per-tensor exponents and their policy (a fixed step-0 exponent; then
// from the previous step's global maximum |g| over micro-batch gradients with a documented headroom), the
// per-attempt tally that decides a retry (any element beyond 2^63/M), and the exact global sum of squares
// for the norm. Every rank holds identical exponents because every input to them is global and exact; a pipeline
// stage keeps a slot for every tensor of the whole model (its absent units' too), so the tallies of all stages line
// up and the exponents agree everywhere.
// Used by none (on its own copy, without communicators), ddp, zero1/2/3, hsdp and asynchzp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "hzp/core/tensor.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::coll {
class Communicator;
}

namespace hzp::schedulers {

/// Unsigned 128-bit integer (GCC/Clang), as kernels::uint128: the exact sum of fixed-point squares.
__extension__ typedef unsigned __int128 uint128;  // __extension__: GCC/Clang type, no -Wpedantic noise

/// The constants of the scale policy (documented in docs/deterministic.md; tests change them to force
/// retries). With L = floor(log2(limit)), limit = (2^63 − 1)/M for M micro-batches per step:
///   step 0:   e = step0_exponent for every tensor (|g| up to 2^(L − e) fits: 2^9 = 512 at M = 8);
///   later:    e = L − headroom_bits − k, where 2^(k−1) <= max|g| < 2^k is the tensor's largest micro-batch
///             gradient element of the previous step (all ranks, all micro-batches); a tensor whose
///             gradients were all zero keeps its exponent; clamped to [−120, 120] (kernels/fixed_point.hpp);
///   retry:    when any element of any micro-batch exceeds the limit, the step is run again with every
///             exponent set as above from this attempt's maxima (so one retry suffices: the retried step
///             computes the same micro-batch gradients); at most max_retries per step.
struct FixedPointPolicy {
  int step0_exponent = 50;
  int headroom_bits = 4;  ///< 16x room for a tensor's gradients to grow from one step to the next
  int max_retries = 3;
};

class FixedPointGrads {
 public:
  /// `micro_batches` = M, the micro-batches of one step over all ranks (train.micro_batches()).
  FixedPointGrads(const workloads::ParamLayout& layout, std::int64_t micro_batches, FixedPointPolicy policy = {});

  std::int64_t limit() const noexcept { return limit_; }
  int num_tensors() const noexcept { return static_cast<int>(exponents_.size()); }
  int exponent(int tensor) const { return exponents_.at(static_cast<std::size_t>(tensor)); }
  const FixedPointPolicy& policy() const noexcept { return policy_; }

  /// Starts an attempt of step `step` (0, 1, 2, ...; an attempt of a new step first sets the exponents from
  /// the previous step's accepted maxima) and clears the tally. Until the next step's first attempt the
  /// exponents stay those the last accepted attempt used, so to_float() can convert its sums afterwards.
  void begin_attempt(std::int64_t step);
  /// One micro-batch's final gradient of unit `unit` (fp32, the unit's numel elements) into int64 `q`
  /// (same length): written, or added when `accumulate`. Tallies maxima and over-limit/non-finite counts.
  void to_fixed(int unit, ConstTensorView grad, TensorView q, bool accumulate);
  /// Elements [begin, begin + grad.numel()) of one micro-batch's gradient of unit `unit` into int64 `q` (written),
  /// tallied as to_fixed tallies: a part of a gradient that is exchanged on its own (asynchzp's tied rows).
  void to_fixed_at(int unit, std::int64_t begin, ConstTensorView grad, TensorView q);
  /// Elements [begin, begin + q.numel()) of unit `unit` back to fp32 (out, same length as q).
  void to_float(int unit, std::int64_t begin, ConstTensorView q, TensorView out) const;
  /// The same for flat elements [global_begin, global_begin + q.numel()) of the model, which may span units
  /// (segments that are not units: asynchzp's per-tensor launch).
  void to_float_at(std::int64_t global_begin, ConstTensorView q, TensorView out) const;

  /// This rank's tally, to be combined with a MAX all-reduce (fp64) over every rank that converted
  /// micro-batch gradients before conclude(): per-tensor max |g|, then over-limit and non-finite flags.
  std::vector<double> tally() const;
  std::size_t tally_size() const noexcept { return exponents_.size() + 2; }
  /// Decides from the global tally: false = the attempt is void, run the step again (exponents already
  /// changed); true = accepted. Throws PreconditionError naming the step when a gradient is not finite (the
  /// run diverged) or max_retries are spent. Every rank reaches the same decision from the same tally.
  bool conclude(std::span<const double> global_tally);
  /// Retries of the current (or last) step.
  std::int64_t retries() const noexcept { return retries_; }

  /// The scale state a checkpoint keeps (the last step, its exponents and accepted maxima), as exact doubles, and
  /// its restore (checkpoint_state.cpp). The same on every rank. DataError when `state` has another tensor count.
  std::vector<double> saved_state() const;
  void restore_state(std::span<const double> state);

  /// The grid of the norm's squares: 2^−S with S = 1 + 2·min_t(e_t) − ceil(log2 N), so that N squares of
  /// gradients converted from these exponents (each < 2^(126 − 2e)) sum below 2^127.
  int square_exponent() const;
  /// Σ g² over this rank's `grads` (fp32 values converted by to_float; padding zeros allowed), summed
  /// exactly over `group` (nullptr or size 1: local only), returned as a double. The group's members must
  /// hold disjoint parts of the gradient that together cover it once. Blocking collective over `group`.
  double global_sum_squares(ConstTensorView grads, coll::Communicator* group) const;
  /// The same over several parts of a slice (the elements a tensor-parallel rank counts, distinct_norm.hpp).
  double global_sum_squares(std::span<const ConstTensorView> parts, coll::Communicator* group) const;

  /// Visits the tensors overlapping elements [begin, begin + count) of unit `unit`:
  /// fn(tensor_index, offset_in_range, length).
  template <typename Fn>
  void for_each_tensor(int unit, std::int64_t begin, std::int64_t count, Fn&& fn) const;

 private:
  // Elements [begin, begin + q.numel()) of unit `unit` converted (written or added) and tallied.
  void convert_tallied(int unit, std::int64_t begin, ConstTensorView grad, TensorView q, bool accumulate);
  int exponent_for(double max_abs, int current, std::size_t tensor) const;
  // A tensor of a unit two pipeline stages hold (Unit::shared) sums both stages' contributions, so each stage
  // converts against half the limit (one bit less of range) and the two sums still fit in int64 when added.
  std::int64_t limit_of(std::size_t tensor) const noexcept { return limit_ >> halved_[tensor]; }

  const workloads::ParamLayout* layout_;
  FixedPointPolicy policy_;
  std::int64_t limit_;
  int log2_limit_;
  std::vector<int> first_tensor_;  // per unit: global index of its first tensor
  std::vector<std::uint8_t> halved_;  // per tensor: 1 for a shared unit's
  std::int64_t model_numel_ = 0;      // the whole model's elements (a pipeline stage's absent units included)
  std::vector<int> exponents_;
  std::vector<double> max_abs_;    // this attempt, this rank
  std::int64_t over_ = 0, non_finite_ = 0;
  std::vector<double> accepted_max_;  // the last accepted attempt's global maxima
  bool have_accepted_ = false;
  std::int64_t retries_ = 0;
  std::int64_t step_ = -1;
};

template <typename Fn>
void FixedPointGrads::for_each_tensor(int unit, std::int64_t begin, std::int64_t count, Fn&& fn) const {
  const auto& tensors = layout_->unit(unit).tensors;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::int64_t lo = std::max(begin, tensors[t].offset);
    const std::int64_t hi = std::min(begin + count, tensors[t].offset + tensors[t].numel());
    if (hi > lo) fn(first_tensor_[static_cast<std::size_t>(unit)] + static_cast<int>(t), lo - begin, hi - lo);
  }
}

/// Exact sum of unsigned 128-bit values over `group` (four 32-bit limbs, int64 all-reduce): exact for
/// any group of fewer than 2^31 ranks while the true sum fits in 128 bits.
uint128 all_reduce_uint128(coll::Communicator* group, uint128 local);

}  // namespace hzp::schedulers
