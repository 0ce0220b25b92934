// Host launchers for the vocabulary-parallel embedding and cross-entropy: validation of shapes, dtypes,
// devices, vocab_begin, ids and the gradient normaliser, then dtype dispatch (f64, f32, bf16) to the CPU
// reference, or for a CUDA stream to vocab_parallel.cu. Device-resident ids are not checked on the host
// (that would need a copy and a synchronisation); the CUDA kernels treat negative ids as outside the slice.
#include "hzp/kernels/vocab_parallel.hpp"

#include <cmath>
#include <string_view>
#include <utility>

#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "vocab_parallel/vocab_parallel_ref.hpp"

namespace hzp::kernels {
namespace {

/// The statistics and losses of a row are fp64 for f64 logits, fp32 otherwise (as cross-entropy's losses).
DType stats_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }
DType grad_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

void require_ndim(std::string_view kernel, std::string_view arg, const Shape& sh, int ndim, std::string_view layout) {
  if (sh.ndim != ndim)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has shape ", to_string(sh), ", expected ", layout);
}

void require_float_dtype(std::string_view kernel, std::string_view arg, DType t) {
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has dtype ", dtype_name(t), ", expected fp64, fp32 or bf16");
}

/// A slice starts at a global vocabulary id, so it cannot be negative.
void check_vocab_begin(std::string_view kernel, std::int64_t vocab_begin) {
  if (vocab_begin < 0)
    HZP_THROW(PreconditionError, kernel, ": vocab_begin = ", vocab_begin,
              " must be non-negative (the global id of this slice's first row)");
}

/// An [N] int32 tensor of ids on the stream's device.
void check_ids_tensor(std::string_view kernel, std::string_view arg, const ConstTensorView& ids, std::int64_t N,
                      StreamRef s) {
  check_shape(kernel, arg, ids.shape(), Shape{N});
  check_dtype(kernel, arg, ids.dtype(), DType::i32);
  check_device(kernel, arg, ids.device(), s);
}

/// An [N] statistics tensor of the given dtype on the stream's device.
void check_stats_tensor(std::string_view kernel, std::string_view arg, const ConstTensorView& v, std::int64_t N,
                        DType dtype, StreamRef s) {
  check_shape(kernel, arg, v.shape(), Shape{N});
  check_dtype(kernel, arg, v.dtype(), dtype);
  check_device(kernel, arg, v.device(), s);
}

/// logits must be this slice's [N, Vl]; returns {N, Vl} after checking dtype and device.
std::pair<std::int64_t, std::int64_t> check_logits(std::string_view kernel, const ConstTensorView& logits,
                                                   StreamRef s) {
  require_ndim(kernel, "logits", logits.shape(), 2, "[tokens, local vocab]");
  const std::int64_t N = logits.shape()[0], Vl = logits.shape()[1];
  check_positive(kernel, "logits tokens", N);
  check_positive(kernel, "logits local vocab", Vl);
  require_float_dtype(kernel, "logits", logits.dtype());
  check_device(kernel, "logits", logits.device(), s);
  return {N, Vl};
}

/// Every target is ignore_index or a global id; a slice cannot see the total vocabulary, so only the
/// sign is checked (a negative target would otherwise be silently outside every slice).
void check_target_values(std::string_view kernel, const std::int32_t* targets, std::int64_t N,
                         std::int32_t ignore_index) {
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int32_t t = targets[n];
    if (t != ignore_index && t < 0)
      HZP_THROW(PreconditionError, kernel, ": targets[", n, "] = ", t, " is negative and is not ignore_index = ",
                ignore_index);
  }
}

void check_grad(std::string_view kernel, const CrossEntropyGrad& g) {
  check_cross_entropy_scale(kernel, g.normaliser, g.dloss);
}

}  // namespace

void embedding_fwd_vocab_range(TensorView out, ConstTensorView tokens, ConstTensorView table_rows,
                               std::int64_t vocab_begin, StreamRef s) {
  constexpr std::string_view k = "embedding_fwd_vocab_range";
  require_ndim(k, "tokens", tokens.shape(), 1, "[tokens]");
  require_ndim(k, "table_rows", table_rows.shape(), 2, "[local vocab, dim]");
  const std::int64_t n = tokens.shape()[0], rows = table_rows.shape()[0], dim = table_rows.shape()[1];
  check_positive(k, "tokens", n);
  check_positive(k, "local vocab (rows of table_rows)", rows);
  check_positive(k, "dim (columns of table_rows)", dim);
  check_vocab_begin(k, vocab_begin);
  check_shape(k, "out", out.shape(), Shape{n, dim});
  check_dtype(k, "tokens", tokens.dtype(), DType::i32);
  require_float_dtype(k, "table_rows", table_rows.dtype());
  check_dtype(k, "out", out.dtype(), table_rows.dtype());
  check_device(k, "out", out.device(), s);
  check_device(k, "tokens", tokens.device(), s);
  check_device(k, "table_rows", table_rows.device(), s);
  if (s.device().is_cuda()) return cuda::embedding_fwd_vocab_range(out, tokens, table_rows, vocab_begin, s);
  dispatch_float(table_rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    embedding_fwd_vocab_range_ref(out.as<T>(), tokens.as<std::int32_t>(), table_rows.as<T>(), n, vocab_begin, rows,
                                  dim);
  });
}

void embedding_bwd_vocab_range(TensorView dtable_rows, ConstTensorView tokens, ConstTensorView dout,
                               std::int64_t vocab_begin, bool accumulate, StreamRef s) {
  constexpr std::string_view k = "embedding_bwd_vocab_range";
  require_ndim(k, "tokens", tokens.shape(), 1, "[tokens]");
  require_ndim(k, "dtable_rows", dtable_rows.shape(), 2, "[local vocab, dim]");
  const std::int64_t n = tokens.shape()[0], rows = dtable_rows.shape()[0], dim = dtable_rows.shape()[1];
  check_positive(k, "tokens", n);
  check_positive(k, "local vocab (rows of dtable_rows)", rows);
  check_positive(k, "dim (columns of dtable_rows)", dim);
  check_vocab_begin(k, vocab_begin);
  check_shape(k, "dout", dout.shape(), Shape{n, dim});
  check_dtype(k, "tokens", tokens.dtype(), DType::i32);
  require_float_dtype(k, "dout", dout.dtype());
  check_dtype(k, "dtable_rows", dtable_rows.dtype(), grad_dtype(dout.dtype()));
  check_device(k, "dtable_rows", dtable_rows.device(), s);
  check_device(k, "tokens", tokens.device(), s);
  check_device(k, "dout", dout.device(), s);
  if (s.device().is_cuda())
    return cuda::embedding_bwd_vocab_range(dtable_rows, tokens, dout, vocab_begin, accumulate, s);
  dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    embedding_bwd_vocab_range_ref(dtable_rows.as<grad_t<T>>(), tokens.as<std::int32_t>(), dout.as<T>(), n,
                                  vocab_begin, rows, dim, accumulate);
  });
}

void vocab_parallel_ce_local_stats(TensorView row_max, TensorView target_logit, ConstTensorView logits,
                                   ConstTensorView targets, std::int64_t vocab_begin, std::int32_t ignore_index,
                                   StreamRef s) {
  constexpr std::string_view k = "vocab_parallel_ce_local_stats";
  const auto [N, Vl] = check_logits(k, logits, s);
  check_vocab_begin(k, vocab_begin);
  check_ids_tensor(k, "targets", targets, N, s);
  const DType st = stats_dtype(logits.dtype());
  check_stats_tensor(k, "row_max", row_max, N, st, s);
  check_stats_tensor(k, "target_logit", target_logit, N, st, s);
  if (s.device().is_cuda())
    return cuda::vocab_parallel_ce_local_stats(row_max, target_logit, logits, targets, vocab_begin, ignore_index, s);
  check_target_values(k, targets.as<std::int32_t>(), N, ignore_index);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    vocab_parallel_ce_local_stats_ref<T>(row_max.as<acc_t<T>>(), target_logit.as<acc_t<T>>(), logits.as<T>(),
                                         targets.as<std::int32_t>(), N, Vl, vocab_begin, ignore_index);
  });
}

void vocab_parallel_ce_sum_exp(TensorView sum_exp, ConstTensorView logits, ConstTensorView global_max, StreamRef s) {
  constexpr std::string_view k = "vocab_parallel_ce_sum_exp";
  const auto [N, Vl] = check_logits(k, logits, s);
  const DType st = stats_dtype(logits.dtype());
  check_stats_tensor(k, "global_max", global_max, N, st, s);
  check_stats_tensor(k, "sum_exp", sum_exp, N, st, s);
  if (s.device().is_cuda()) return cuda::vocab_parallel_ce_sum_exp(sum_exp, logits, global_max, s);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    vocab_parallel_ce_sum_exp_ref<T>(sum_exp.as<acc_t<T>>(), logits.as<T>(), global_max.as<acc_t<T>>(), N, Vl);
  });
}

CrossEntropyResult vocab_parallel_ce_loss(TensorView losses, ConstTensorView global_max,
                                          ConstTensorView global_sum_exp, ConstTensorView global_target_logit,
                                          ConstTensorView targets, std::int32_t ignore_index, StreamRef s) {
  constexpr std::string_view k = "vocab_parallel_ce_loss";
  // No logits here: the statistics carry the dtype (fp32 for f32/bf16 logits, fp64 for f64).
  require_ndim(k, "global_max", global_max.shape(), 1, "[tokens]");
  const std::int64_t N = global_max.shape()[0];
  check_positive(k, "tokens", N);
  const DType st = global_max.dtype();
  if (st != DType::f64 && st != DType::f32)
    HZP_THROW(PreconditionError, k, ": global_max has dtype ", dtype_name(st),
              ", expected fp32 or fp64 (the statistics' dtype)");
  check_stats_tensor(k, "global_max", global_max, N, st, s);
  check_stats_tensor(k, "global_sum_exp", global_sum_exp, N, st, s);
  check_stats_tensor(k, "global_target_logit", global_target_logit, N, st, s);
  check_stats_tensor(k, "losses", losses, N, st, s);
  check_ids_tensor(k, "targets", targets, N, s);
  if (s.device().is_cuda())
    return cuda::vocab_parallel_ce_loss(losses, global_max, global_sum_exp, global_target_logit, targets,
                                        ignore_index, s);
  check_target_values(k, targets.as<std::int32_t>(), N, ignore_index);
  const auto run = [&](auto tag) {
    using S = decltype(tag);
    return vocab_parallel_ce_loss_ref<S>(losses.as<S>(), global_max.as<S>(), global_sum_exp.as<S>(),
                                         global_target_logit.as<S>(), targets.as<std::int32_t>(), N, ignore_index);
  };
  return st == DType::f64 ? run(double{}) : run(float{});
}

void vocab_parallel_ce_bwd(TensorView dlogits, ConstTensorView logits, ConstTensorView targets,
                           std::int64_t vocab_begin, ConstTensorView global_max, ConstTensorView global_sum_exp,
                           const CrossEntropyGrad& grad, StreamRef s) {
  constexpr std::string_view k = "vocab_parallel_ce_bwd";
  const auto [N, Vl] = check_logits(k, logits, s);
  check_vocab_begin(k, vocab_begin);
  check_ids_tensor(k, "targets", targets, N, s);
  check_shape(k, "dlogits", dlogits.shape(), logits.shape());
  check_dtype(k, "dlogits", dlogits.dtype(), logits.dtype());
  check_device(k, "dlogits", dlogits.device(), s);
  const DType st = stats_dtype(logits.dtype());
  check_stats_tensor(k, "global_max", global_max, N, st, s);
  check_stats_tensor(k, "global_sum_exp", global_sum_exp, N, st, s);
  check_grad(k, grad);
  if (s.device().is_cuda())
    return cuda::vocab_parallel_ce_bwd(dlogits, logits, targets, vocab_begin, global_max, global_sum_exp, grad, s);
  check_target_values(k, targets.as<std::int32_t>(), N, grad.ignore_index);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    vocab_parallel_ce_bwd_ref<T>(dlogits.as<T>(), logits.as<T>(), targets.as<std::int32_t>(), N, Vl, vocab_begin,
                                 global_max.as<acc_t<T>>(), global_sum_exp.as<acc_t<T>>(), grad);
  });
}

}  // namespace hzp::kernels
