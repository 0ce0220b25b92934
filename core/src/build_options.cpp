// Version and build-option strings from the generated hzp/config.hpp.
#include "hzp/config.hpp"
#include "hzp/core/build_info.hpp"

namespace hzp {
std::string_view hzpbench_version() noexcept { return HZP_VERSION_STRING; }

std::string build_options() {
  std::string s = "build=" HZP_BUILD_TYPE;
  s += HZP_HAVE_CUDA ? " cuda=on(arch " HZP_CUDA_ARCHITECTURES ")" : " cuda=off";
  s += HZP_HAVE_NCCL ? " nccl=on" : " nccl=off";
  s += HZP_TSAN_BUILD ? " tsan=on" : " tsan=off";
  s += " compiler=" HZP_CXX_COMPILER;
  return s;
}
}  // namespace hzp
