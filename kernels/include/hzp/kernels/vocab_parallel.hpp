// Vocabulary-parallel embedding and softmax cross-entropy for tensor parallelism: each of the `tp`
// ranks of a group holds vocabulary rows [vocab_begin, vocab_begin + Vl) of the [V, D] embedding table
// (and of the LM head), so its logits are [N, Vl], never the full vocabulary. These kernels compute one
// rank's part; the caller combines the per-rank statistics with all-reduces between the calls:
//   forward   embedding_fwd_vocab_range, then all-reduce(sum) of out (every token has one owner rank);
//   loss      vocab_parallel_ce_local_stats → all-reduce(max) row_max → vocab_parallel_ce_sum_exp
//             → all-reduce(sum) sum_exp and target_logit → vocab_parallel_ce_loss (identical on every rank);
//   backward  vocab_parallel_ce_bwd on this rank's slice; embedding_bwd_vocab_range into this rank's rows.
// CPU references in kernels/vocab_parallel/vocab_parallel_ref.hpp; the CUDA twin (fp32, bf16) in
// vocab_parallel.cu.
#pragma once

#include <cstdint>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/kernels/cross_entropy.hpp"

namespace hzp::kernels {

// Layouts as embedding.hpp and cross_entropy.hpp, with this rank's slice: table_rows [Vl, D], logits
// [N, Vl] (f64, f32 or bf16), tokens / targets [N] int32 holding GLOBAL vocabulary ids. vocab_begin >= 0
// is the global id of this slice's first row; slices may have any size (uneven splits work).
// Statistics (row_max, target_logit, sum_exp, global_*) and losses are [N] in the stats dtype: fp32 for
// f32/bf16 logits, fp64 for f64 logits (as cross_entropy's losses).
// A slice cannot see the total vocabulary V, so ids are only checked for sign on the CPU: a negative
// token id, or a negative target other than ignore_index, throws PreconditionError naming its position;
// an id >= V is indistinguishable from another rank's and is silently outside every slice.
// Stream semantics: CPU launchers run synchronously on the calling thread. On a CUDA stream every
// launcher is enqueued, except vocab_parallel_ce_loss, which copies the losses back and synchronises
// once (its sum is returned by value). Device ids are not checked on the host: the CUDA kernels treat a
// negative token id as outside the slice and a negative target as ignored.
// Determinism: CPU loops run in index order; the CUDA embedding backward uses atomics (as embedding_bwd).

/// out[t, :] = table_rows[tokens[t] − vocab_begin, :] when vocab_begin <= tokens[t] < vocab_begin + Vl,
/// else zeros (so the sum over the ranks of a group is the full lookup).
/// @param[out] out         [T, D], table_rows' dtype
/// @param[in]  tokens      [T] int32 global ids (negative: PreconditionError on the CPU, nothing written)
/// @param[in]  table_rows  [Vl, D] f64, f32 or bf16
void embedding_fwd_vocab_range(TensorView out, ConstTensorView tokens, ConstTensorView table_rows,
                               std::int64_t vocab_begin, StreamRef s);

/// dtable_rows[tokens[t] − vocab_begin, :] += dout[t, :] for the tokens inside this slice, in token
/// order (CPU: deterministic); tokens outside are skipped.
/// @param[in,out] dtable_rows [Vl, D] in the gradient type: fp32 for bf16 dout, else dout's dtype.
///                            accumulate = false zeroes it first (dW =), true adds (dW +=).
/// @param[in]     dout        [T, D]
void embedding_bwd_vocab_range(TensorView dtable_rows, ConstTensorView tokens, ConstTensorView dout,
                               std::int64_t vocab_begin, bool accumulate, StreamRef s);

/// This slice's per-row statistics:
///   row_max[n]      = max_j logits[n, j] (every row, ignored or not);
///   target_logit[n] = logits[n, targets[n] − vocab_begin] when the target lies in this slice, else 0
///                     (and 0 for ignore_index), so the sum over the ranks is the target's logit.
/// @param[out] row_max, target_logit [N] stats dtype
void vocab_parallel_ce_local_stats(TensorView row_max, TensorView target_logit, ConstTensorView logits,
                                   ConstTensorView targets, std::int64_t vocab_begin, std::int32_t ignore_index,
                                   StreamRef s);

/// sum_exp[n] = Σ_j exp(logits[n, j] − global_max[n]), accumulated in fp64 and stored in the stats
/// dtype. global_max is the row maximum over the whole vocabulary (row_max all-reduced with MAX), so
/// every term is <= 1 and the sums of the ranks add up without rescaling.
/// @param[out] sum_exp [N] stats dtype; @param[in] global_max [N] stats dtype
void vocab_parallel_ce_sum_exp(TensorView sum_exp, ConstTensorView logits, ConstTensorView global_max, StreamRef s);

/// losses[n] = log(global_sum_exp[n]) + global_max[n] − global_target_logit[n], 0 for targets[n] ==
/// ignore_index. All inputs are the group-wide values, so every rank computes the same losses.
/// @param[out] losses [N] in the stats' dtype (fp32 or fp64; fp32 only on CUDA)
/// @return the fp64 sum of the stored losses in token order and the count of non-ignored tokens, as
///         cross_entropy_fwd. On CUDA: copies the losses back and synchronises the stream once.
CrossEntropyResult vocab_parallel_ce_loss(TensorView losses, ConstTensorView global_max,
                                          ConstTensorView global_sum_exp, ConstTensorView global_target_logit,
                                          ConstTensorView targets, std::int32_t ignore_index, StreamRef s);

/// This slice of the cross-entropy gradient:
///   dlogits[n, j] = (exp(logits[n, j] − global_max[n]) / global_sum_exp[n] − [targets[n] == vocab_begin + j])
///                   · grad.dloss / grad.normaliser;
/// rows with targets[n] == grad.ignore_index are zeroed. grad.normaliser > 0 as for cross_entropy_bwd.
/// @param[out] dlogits [N, Vl] in the logits' dtype (may alias logits: each row is read before written)
void vocab_parallel_ce_bwd(TensorView dlogits, ConstTensorView logits, ConstTensorView targets,
                           std::int64_t vocab_begin, ConstTensorView global_max, ConstTensorView global_sum_exp,
                           const CrossEntropyGrad& grad, StreamRef s);

}  // namespace hzp::kernels
