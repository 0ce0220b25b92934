// Softmax cross-entropy over the vocabulary: per-token losses and their sum (forward), dlogits
// (backward), and a fused forward+backward that saves a pass over the vocabulary. Numerically stable
// (max-subtracted log-sum-exp, exp sums in fp64) with an ignore index. CPU reference in
// kernels/cross_entropy/cross_entropy_ref.hpp; the CUDA twin (fp32, bf16) in cross_entropy.cu.
#pragma once

#include <cstdint>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

// Layouts: logits [N, V] row-major (N = tokens = batch·seq; V any size, e.g. 155,136), targets [N] int32,
// losses [N], dlogits [N, V] in the logits' dtype. logits: f64, f32 or bf16; losses are fp32 for f32/bf16
// logits and fp64 for f64 logits (the oracle keeps full precision).
// A token whose target equals ignore_index gets loss 0 and an all-zero gradient row; any other target
// must lie in [0, V) (checked, the message names the token, the target and V).
// Stream semantics: on a CPU stream the launchers run synchronously on the calling thread and the
// returned sums are final. On a CUDA stream the backward is enqueued; the forward (and fwd_bwd) copy the
// per-token losses back and synchronise the stream once, since the sum is returned by value. Device
// targets are not range-checked on the host: the CUDA kernel treats an out-of-range target as ignored.
// Determinism: each row is reduced in a fixed order and the loss sum runs over tokens in index order.

/// What the forward returns: the sum of the per-token losses (fp64, token order) and how many tokens
/// were not ignored. mean() is this call's mean; see CrossEntropyGrad for why a training step
/// should divide by a global count instead.
struct CrossEntropyResult {
  double loss_sum = 0.0;
  std::int64_t n_valid = 0;
  double mean() const noexcept { return n_valid > 0 ? loss_sum / static_cast<double>(n_valid) : 0.0; }
};

/// How the backward scales: dlogits = (softmax(logits) − onehot(target)) · dloss / normaliser.
/// `normaliser` is the divisor of the mean loss and must be given explicitly (> 0): with gradient
/// accumulation (or data parallelism) the loss is the mean over every non-ignored token of the whole
/// global batch, so each micro-batch must divide by that global count, not by its own n_valid;
/// dividing by the micro-batch count would weight micro-batches with many ignored tokens too heavily.
/// For a single micro-batch, normaliser = cross_entropy_count_valid(targets, ...).
struct CrossEntropyGrad {
  std::int32_t ignore_index = -1;
  double normaliser = 0.0;  // > 0: number of non-ignored tokens the mean runs over (global batch)
  double dloss = 1.0;       // upstream gradient of the mean loss
};

/// Number of targets that are not ignore_index (the per-call normaliser).
std::int64_t cross_entropy_count_valid(ConstTensorView targets, std::int32_t ignore_index, StreamRef s);

/// losses[n] = logsumexp(logits[n, :]) − logits[n, targets[n]] (0 for ignored tokens).
/// @param[out] losses [N] fp32 (fp64 for f64 logits)
/// @param[in]  logits [N, V]; targets [N] int32
/// @return the sum of the stored losses in fp64 and the count of non-ignored tokens
CrossEntropyResult cross_entropy_fwd(TensorView losses, ConstTensorView logits, ConstTensorView targets,
                                     std::int32_t ignore_index, StreamRef s);

/// dlogits = (softmax(logits) − onehot(targets)) · grad.dloss / grad.normaliser; ignored rows are zeroed.
/// @param[out] dlogits [N, V] in the logits' dtype (may alias logits: each row is read before it is written)
void cross_entropy_bwd(TensorView dlogits, ConstTensorView logits, ConstTensorView targets,
                       const CrossEntropyGrad& grad, StreamRef s);

/// Forward and backward together: two passes over each row (statistics, then gradients) instead of the
/// three of cross_entropy_fwd followed by cross_entropy_bwd, which recomputes the statistics.
/// @param[out] losses as cross_entropy_fwd; dlogits as cross_entropy_bwd (may alias logits)
CrossEntropyResult cross_entropy_fwd_bwd(TensorView losses, TensorView dlogits, ConstTensorView logits,
                                         ConstTensorView targets, const CrossEntropyGrad& grad, StreamRef s);

}  // namespace hzp::kernels
