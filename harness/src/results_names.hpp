// Names shared by the results writer and reader: which root attributes every schema-1 file has,
// which the writer alone sets, and the checks on dataset and attribute names. Kept in one place so
// that the writer cannot start writing a name the reader does not expect (docs/results-schema.md).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::harness {

/// Root attributes every results file of schema 1 has from the moment it is created; the reader
/// refuses a file that lacks any of them.
inline constexpr std::string_view kRequiredAttributes[] = {
    "schema_version", "hzpbench_version", "git_sha",    "git_dirty", "build_options",
    "argv",           "config",           "world_size", "topology",  "backend",
    "cpu_model",      "gpu_model",        "start_time", "end_time",  "status"};

/// Root attributes only the writer sets: the required ones plus its bookkeeping.
inline constexpr std::string_view kWriterOwnedAttributes[] = {
    "schema_version", "hzpbench_version", "git_sha",  "git_dirty", "build_options",    "argv",
    "config",         "world_size",       "topology", "backend",   "cpu_model",        "gpu_model",
    "start_time",     "end_time",         "status",   "host",      "last_flush_unix_s"};

inline bool name_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

/// Dataset paths: '/'-separated segments of [A-Za-z0-9_.-], none empty, "." or "..". Restricting the
/// alphabet keeps names valid for h5py, shells and file-name-like uses in analysis/.
inline void check_series_name(std::string_view name, std::string_view what) {
  HZP_CHECK(!name.empty(), "a ", what, " name is empty");
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = name.find('/', start);
    const std::string_view seg =
        name.substr(start, end == std::string_view::npos ? name.size() - start : end - start);
    HZP_CHECK(!seg.empty() && seg != "." && seg != "..", what, " name '", name,
              "' has an empty, '.' or '..' path segment; use names like 'steps/loss'");
    for (char c : seg)
      HZP_CHECK(name_char_ok(c), what, " name '", name, "' contains '", c,
                "'; use letters, digits, '_', '.', '-' and '/' between groups");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
}

/// Attribute names: one segment of [A-Za-z0-9_.-] (dots group them: data.source, lib.mpi).
inline void check_attribute_name(std::string_view name) {
  HZP_CHECK(!name.empty(), "an attribute name is empty");
  for (char c : name)
    HZP_CHECK(name_char_ok(c), "attribute name '", name, "' contains '", c,
              "'; use letters, digits, '_', '.', '-'");
}

inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace hzp::harness
