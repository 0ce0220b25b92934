// The `hzpbench --version` report: program version, git provenance, build options and the versions
// of every library the run depends on (the same facts a results file records as provenance).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hzp::harness {

/// Ordered (name, value) pairs: hzpbench, git_sha, git_dirty, build, mpi, hdf5, openblas, cuda, nccl, cpu.
std::vector<std::pair<std::string, std::string>> version_facts();
std::string version_report();

}  // namespace hzp::harness
