// Collects library versions without initialising MPI or CUDA (both answer version queries before init).
#include "hzp/harness/version_report.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <cstdio>

#include "hzp/core/build_info.hpp"
#include "hzp/core/device.hpp"

extern "C" char* openblas_get_config(void);

namespace hzp::harness {

std::vector<std::pair<std::string, std::string>> version_facts() {
  std::vector<std::pair<std::string, std::string>> f;
  f.emplace_back("hzpbench", std::string(hzpbench_version()));
  f.emplace_back("git_sha", std::string(git_sha()));
  f.emplace_back("git_dirty", git_dirty() ? "true" : "false");
  f.emplace_back("build", build_options());

  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  std::string mpi(mpi_version, static_cast<std::size_t>(len));
  if (auto nl = mpi.find('\n'); nl != std::string::npos) mpi.resize(nl);
  f.emplace_back("mpi", mpi);

  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  f.emplace_back("hdf5", std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel) +
                             (H5_HAVE_PARALLEL ? " (parallel)" : " (serial)"));
  f.emplace_back("openblas", openblas_get_config());
  f.emplace_back("cuda_runtime", cuda_compiled() ? cuda_runtime_version() : "not built");
  f.emplace_back("cuda_devices", std::to_string(cuda_device_count()));
  f.emplace_back("cpu", cpu_model_name());
  return f;
}

std::string version_report() {
  std::string s;
  for (const auto& [k, v] : version_facts()) {
    s += k;
    s.append(k.size() < 14 ? 14 - k.size() : 1, ' ');
    s += v;
    s += '\n';
  }
  return s;
}

}  // namespace hzp::harness
