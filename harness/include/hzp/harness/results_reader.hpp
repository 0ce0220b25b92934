// Reading a results file back (docs/results-schema.md): open read-only, check it is an hzpbench
// results file of a schema this build knows, then read root attributes, dataset shapes and values.
// Used by `hzpbench inspect` and the tests; analysis/ reads the same files with h5py. One thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hzp/harness/results_file.hpp"

namespace hzp::harness {

/// One dataset of a results file.
struct DatasetInfo {
  std::string name;                 ///< path without the leading '/': "steps/loss"
  std::vector<std::int64_t> shape;  ///< `[step]`, `[step, rank]`, `[rank, component]`, ...
  std::string dtype;                ///< "float64", "int64", "float32", or "other"
  std::string units;                ///< the `units` attribute ("" when absent)
  std::string description;          ///< the `description` attribute ("" when absent)
};

class ResultsReader {
 public:
  /// Opens `path` read-only and validates it. Every problem is one exception whose message names the
  /// file, what is wrong and what to do: IoError (missing, unreadable, truncated), DataError (not HDF5,
  /// not a results file, a schema_version newer than kResultsSchemaVersion or unknown, required root
  /// attributes missing). The file is opened without HDF5's file lock, so the file of a live run can
  /// be read (what its last flush wrote).
  explicit ResultsReader(const std::filesystem::path& path);
  ResultsReader(ResultsReader&&) noexcept;
  ResultsReader& operator=(ResultsReader&&) noexcept;
  ~ResultsReader();

  const std::filesystem::path& path() const noexcept;
  std::int64_t schema_version() const;
  RunStatus status() const;

  // ---- root attributes ---------------------------------------------------------------------------
  std::optional<AttrValue> attribute(std::string_view name) const;
  /// Typed access; a missing attribute or another type throws DataError naming file and attribute.
  std::string string_attribute(std::string_view name) const;
  std::int64_t int_attribute(std::string_view name) const;
  /// Reads float64 attributes, and int64 ones converted.
  double double_attribute(std::string_view name) const;
  std::vector<std::string> attribute_names() const;
  /// Root attributes whose names start with `prefix` ("data.", "lib.", "threads."), prefix removed.
  std::vector<std::pair<std::string, AttrValue>> attributes_with_prefix(std::string_view prefix) const;

  // ---- datasets ----------------------------------------------------------------------------------
  /// Every dataset in the file, sorted by name.
  std::vector<DatasetInfo> datasets() const;
  std::optional<DatasetInfo> dataset(std::string_view name) const;
  std::optional<AttrValue> dataset_attribute(std::string_view dataset, std::string_view name) const;
  /// All values of a numeric dataset, row-major, as double (int64 converted) or int64 (integers only).
  /// A missing dataset throws DataError.
  std::vector<double> read_doubles(std::string_view name) const;
  std::vector<std::int64_t> read_ints(std::string_view name) const;
  /// Steps recorded completely: the fewest rows among the growing series (datasets under steps/,
  /// ranks/ and comm/), 0 when there are none. A killed writer may have one series a row ahead.
  std::int64_t completed_steps() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Scalar attribute as text: integers and strings as they are, doubles with up to 10 significant
/// digits, lists joined with spaces.
std::string attr_to_string(const AttrValue& value);

}  // namespace hzp::harness
