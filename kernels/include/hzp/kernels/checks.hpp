// Argument validation shared by every kernel launcher: shapes, dtypes, devices and workspace sizes,
// each failing with a message that names the kernel, the argument and the dimensions involved.
#pragma once

#include <cstddef>
#include <string_view>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// Throws PreconditionError unless `t` has exactly `expected` shape.
/// Message: "<kernel>: <arg> has shape [..], expected [..]".
void check_shape(std::string_view kernel, std::string_view arg, const Shape& actual, const Shape& expected);
/// Throws unless `t` has dtype `expected`.
void check_dtype(std::string_view kernel, std::string_view arg, DType actual, DType expected);
/// Throws unless the tensor lives on the stream's device.
void check_device(std::string_view kernel, std::string_view arg, Device actual, StreamRef s);
/// Throws unless the caller-provided workspace holds at least `needed` bytes.
void check_workspace(std::string_view kernel, std::size_t have, std::size_t needed);
/// Throws unless a dimension is positive (sizes of zero are refused by name).
void check_positive(std::string_view kernel, std::string_view what, long long value);
/// Throws unless a cross-entropy backward's normaliser is positive and finite and its dloss finite (the full and
/// the vocabulary-parallel backward share the rule).
void check_cross_entropy_scale(std::string_view kernel, double normaliser, double dloss);

}  // namespace hzp::kernels
