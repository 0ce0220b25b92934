// Kernel argument validation: one place that formats shape/dtype/device errors.
#include "hzp/kernels/checks.hpp"

#include <cmath>

#include "hzp/core/error.hpp"

namespace hzp::kernels {

void check_shape(std::string_view kernel, std::string_view arg, const Shape& actual, const Shape& expected) {
  if (!(actual == expected))
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has shape ", to_string(actual), ", expected ",
              to_string(expected));
}

void check_dtype(std::string_view kernel, std::string_view arg, DType actual, DType expected) {
  if (actual != expected)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has dtype ", dtype_name(actual), ", expected ",
              dtype_name(expected));
}

void check_device(std::string_view kernel, std::string_view arg, Device actual, StreamRef s) {
  if (actual != s.device())
    HZP_THROW(PreconditionError, kernel, ": ", arg, " is on ", to_string(actual), " but the stream is on ",
              to_string(s.device()));
}

void check_workspace(std::string_view kernel, std::size_t have, std::size_t needed) {
  if (have < needed)
    HZP_THROW(PreconditionError, kernel, ": workspace of ", have, " bytes is smaller than the ", needed,
              " bytes it needs (ask <kernel>_workspace_bytes for the size)");
}

void check_positive(std::string_view kernel, std::string_view what, long long value) {
  if (value <= 0) HZP_THROW(PreconditionError, kernel, ": ", what, " = ", value, " must be positive");
}

void check_cross_entropy_scale(std::string_view kernel, double normaliser, double dloss) {
  if (!(normaliser > 0.0) || !std::isfinite(normaliser))
    HZP_THROW(PreconditionError, kernel, ": normaliser = ", normaliser,
              " must be positive and finite (the number of non-ignored tokens of the global batch)");
  if (!std::isfinite(dloss)) HZP_THROW(PreconditionError, kernel, ": dloss = ", dloss, " is not finite");
}

}  // namespace hzp::kernels
