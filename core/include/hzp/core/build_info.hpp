// Build provenance: version, git SHA and dirty flag (refreshed on every build), build options.
// Every results file records these so a number in a paper can be traced to the code that made it.
#pragma once

#include <string>
#include <string_view>

namespace hzp {

std::string_view hzpbench_version() noexcept;
/// Commit of the source tree at build time, or "unknown" outside a git checkout.
std::string_view git_sha() noexcept;
/// Whether tracked files differed from that commit at build time.
bool git_dirty() noexcept;
/// "build=RelWithDebInfo cuda=on(arch 90) nccl=on tsan=off compiler=GNU 12.2.0".
std::string build_options();

}  // namespace hzp
