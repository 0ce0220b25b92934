// The CUDA twins of a build without CUDA (cuda_twins.hpp): every twin throws UnsupportedError, so the
// launchers compile and link unchanged and a CUDA stream, which such a build cannot create anyway, gets
// one clear message.
#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"

namespace hzp::kernels::cuda {
namespace {
[[noreturn]] void absent(const char* kernel) {
  HZP_THROW(UnsupportedError, kernel, ": this build has no CUDA kernels; reconfigure with -DHZP_CUDA=ON on a machine "
            "with the CUDA toolkit");
}
}  // namespace

bool built() noexcept { return false; }
std::size_t gemm_workspace_bytes() noexcept { return 0; }
void gemm(TensorView, ConstTensorView, ConstTensorView, bool, bool, float, float, std::span<std::byte>, StreamRef) {
  absent("gemm");
}
void gemm_strided_batched(const MatrixDesc&, const MatrixDesc&, const MatrixDesc&, bool, bool, float, float, int,
                          std::span<std::byte>, StreamRef) {
  absent("gemm");
}
void embedding_fwd(TensorView, ConstTensorView, ConstTensorView, StreamRef) { absent("embedding_fwd"); }
void embedding_bwd(TensorView, ConstTensorView, ConstTensorView, bool, StreamRef) { absent("embedding_bwd"); }
void rmsnorm_fwd(TensorView, TensorView, ConstTensorView, ConstTensorView, float, StreamRef) { absent("rmsnorm_fwd"); }
void rmsnorm_bwd(TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView, ConstTensorView, bool,
                 StreamRef) {
  absent("rmsnorm_bwd");
}
void rope(TensorView, ConstTensorView, std::int64_t, double, bool, StreamRef) { absent("rope"); }
void rope_at(TensorView, ConstTensorView, ConstTensorView, double, bool, StreamRef) { absent("rope_at"); }
void swiglu_fwd(TensorView, ConstTensorView, ConstTensorView, StreamRef) { absent("swiglu_fwd"); }
void swiglu_bwd(TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView, StreamRef) {
  absent("swiglu_bwd");
}
void cast(TensorView, ConstTensorView, StreamRef) { absent("cast"); }
CrossEntropyResult cross_entropy(TensorView*, TensorView*, ConstTensorView, ConstTensorView, std::int32_t,
                                 const CrossEntropyGrad*, StreamRef) {
  absent("cross_entropy");
}
std::int64_t cross_entropy_count_valid(ConstTensorView, std::int32_t, StreamRef) {
  absent("cross_entropy_count_valid");
}
void adamw_step(TensorView, TensorView, TensorView, ConstTensorView, const AdamWHyper&, void*, StreamRef) {
  absent("adamw_step");
}
double grad_norm_sum_squares(std::span<const ConstTensorView>, StreamRef) { absent("grad_norm_sum_squares"); }
void grad_scale_inplace(TensorView, double, StreamRef) { absent("grad_scale_inplace"); }
std::size_t attention_fwd_workspace_bytes(const AttentionDims&, DType) { absent("attention_fwd"); }
std::size_t attention_bwd_workspace_bytes(const AttentionDims&, DType) { absent("attention_bwd"); }
void attention_fwd(TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView, const AttentionDims&,
                   std::span<std::byte>, StreamRef, const std::int32_t*) {
  absent("attention_fwd");
}
void attention_bwd(TensorView, TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                   ConstTensorView, ConstTensorView, ConstTensorView, const AttentionDims&, std::span<std::byte>,
                   StreamRef, const std::int32_t*) {
  absent("attention_bwd");
}
void attention_row_delta(TensorView, ConstTensorView, ConstTensorView, const AttentionDims&, StreamRef) {
  absent("attention_row_delta");
}
std::size_t attention_block_fwd_workspace_bytes(const AttentionBlock&, DType) { absent("attention_block_fwd"); }
std::size_t attention_block_bwd_workspace_bytes(const AttentionBlock&, DType) { absent("attention_block_bwd"); }
void attention_block_state_init(TensorView, TensorView, TensorView, StreamRef) { absent("attention_block_state_init"); }
void attention_block_fwd(TensorView, TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                         const AttentionBlock&, std::span<std::byte>, StreamRef, const std::int32_t*) {
  absent("attention_block_fwd");
}
void attention_block_finish(TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                            const AttentionDims&, StreamRef) {
  absent("attention_block_finish");
}
void attention_block_bwd(TensorView, TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                         ConstTensorView, ConstTensorView, ConstTensorView, const AttentionBlock&,
                         AttentionBlockAccumulate, std::span<std::byte>, StreamRef, const std::int32_t*) {
  absent("attention_block_bwd");
}
void add(TensorView, ConstTensorView, ConstTensorView, StreamRef) { absent("add"); }
void embedding_fwd_vocab_range(TensorView, ConstTensorView, ConstTensorView, std::int64_t, StreamRef) {
  absent("embedding_fwd_vocab_range");
}
void embedding_bwd_vocab_range(TensorView, ConstTensorView, ConstTensorView, std::int64_t, bool, StreamRef) {
  absent("embedding_bwd_vocab_range");
}
void vocab_parallel_ce_local_stats(TensorView, TensorView, ConstTensorView, ConstTensorView, std::int64_t,
                                   std::int32_t, StreamRef) {
  absent("vocab_parallel_ce_local_stats");
}
void vocab_parallel_ce_sum_exp(TensorView, ConstTensorView, ConstTensorView, StreamRef) {
  absent("vocab_parallel_ce_sum_exp");
}
CrossEntropyResult vocab_parallel_ce_loss(TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                                          ConstTensorView, std::int32_t, StreamRef) {
  absent("vocab_parallel_ce_loss");
}
void vocab_parallel_ce_bwd(TensorView, ConstTensorView, ConstTensorView, std::int64_t, ConstTensorView,
                           ConstTensorView, const CrossEntropyGrad&, StreamRef) {
  absent("vocab_parallel_ce_bwd");
}
}  // namespace hzp::kernels::cuda
