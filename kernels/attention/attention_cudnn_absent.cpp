// The fused-attention twin of a build that cannot run it (cuda_twins.hpp): no CUDA, or CUDA without the
// cuDNN frontend's headers. fused_attention_unavailable says which and how to get it; `automatic` then
// resolves to the unfused kernels, and asking for the fused one is refused with that reason.
#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"

namespace hzp::kernels::cuda {
namespace {
[[noreturn]] void absent(const AttentionDims& d, DType t) {
  HZP_THROW(UnsupportedError, "fused attention: ", cuda::fused_attention_unavailable(d, t));
}
}  // namespace

std::string fused_attention_unavailable(const AttentionDims&, DType) {
  if (!built())
    return "this build has no CUDA kernels. Fix: reconfigure with -DHZP_CUDA=ON on a machine with the CUDA toolkit";
  return "this build has no cuDNN frontend headers (cudnn_frontend.h; scripts/bootstrap fetches them into "
         ".deps/cudnn_frontend when nvcc is present). Fix: run scripts/bootstrap and rebuild, or configure with "
         "-DHZP_CUDNN_FRONTEND_INCLUDE=<dir holding cudnn_frontend.h>";
}
std::size_t fused_attention_fwd_workspace_bytes(const AttentionDims& d, DType t) { absent(d, t); }
std::size_t fused_attention_bwd_workspace_bytes(const AttentionDims& d, DType t) { absent(d, t); }
void fused_attention_fwd(TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                         const AttentionDims& d, std::span<std::byte>, StreamRef) {
  absent(d, DType::bf16);
}
void fused_attention_bwd(TensorView, TensorView, TensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                         ConstTensorView, ConstTensorView, ConstTensorView, const AttentionDims& d,
                         std::span<std::byte>, StreamRef) {
  absent(d, DType::bf16);
}

}  // namespace hzp::kernels::cuda
