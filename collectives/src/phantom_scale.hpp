// The device kernel behind a phantom sum (phantom.hpp, sum_of_copies), declared apart so that its CUDA source
// includes nothing of the MPI backend.
#pragma once

#include <cstdint>

#include "hzp/core/dtype.hpp"
#include "hzp/core/stream.hpp"

namespace hzp::coll::detail {

/// x[i] = the sum of p copies of x[i] (f32, bf16 rounded once, f64, i32, i64), enqueued on the CUDA stream s
/// (cuda/phantom_scale.cu); UnsupportedError in a build without CUDA.
void sum_of_copies_on_stream(void* x, std::int64_t n, DType dtype, int p, StreamRef s);

}  // namespace hzp::coll::detail
