// Shape formatting.
#include "hzp/core/tensor.hpp"

namespace hzp {
std::string to_string(const Shape& s) {
  std::string r = "[";
  for (int i = 0; i < s.ndim; ++i) {
    if (i) r += ", ";
    r += std::to_string(s.dims[i]);
  }
  return r + "]";
}
}  // namespace hzp
