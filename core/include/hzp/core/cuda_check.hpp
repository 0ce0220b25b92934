// HZP_CUDA_CHECK: the CUDA runtime instance of HZP_CHECK_CALL (include only in CUDA-enabled code).
#pragma once

#include <cuda_runtime_api.h>

#include "hzp/core/error.hpp"

namespace hzp::detail {
inline const char* describe_cuda(cudaError_t e) { return cudaGetErrorString(e); }
}  // namespace hzp::detail

#define HZP_CUDA_CHECK(stmt) \
  HZP_CHECK_CALL(stmt, ::hzp::CudaError, hzp_status == cudaSuccess, ::hzp::detail::describe_cuda)
