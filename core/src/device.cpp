// Device naming and machine queries (CUDA through the private bridge, CPU model from /proc).
#include "hzp/core/device.hpp"

#include <fstream>

#include "cuda_shim.hpp"
#include "hzp/config.hpp"

namespace hzp {

std::string to_string(Device d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

bool cuda_compiled() noexcept { return HZP_HAVE_CUDA != 0; }
int cuda_device_count() noexcept { return cuda_shim::device_count(); }
std::string cuda_runtime_version() { return cuda_shim::runtime_version(); }
std::string cuda_device_name(int i) { return cuda_shim::device_name(i); }
void make_device_current(Device d) {
  if (d.is_cuda()) cuda_shim::set_device(d.index);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(line.find_first_not_of(" \t", pos + 1));
    }
  }
  return "unknown";
}

}  // namespace hzp
