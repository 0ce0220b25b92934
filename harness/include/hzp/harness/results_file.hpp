// The results file writer: one HDF5 file per run (docs/results-schema.md), written by
// one process (rank 0) on one thread. Root attributes hold provenance and the run's status; datasets
// grow by one row per step (`[step]` or `[step, rank]`); fixed-shape arrays and tensor dumps sit
// beside them. The file uses HDF5's earliest format with the sec2 driver and is flushed by the caller
// as the run goes, so a SIGKILLed writer leaves a file that opens with every flushed step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hzp::harness {

/// The layout version this build writes, and the newest it reads. Bump it when a reader of the old
/// version would misread a new file (a renamed or re-shaped dataset, a changed unit, a new status value);
/// adding an attribute or a dataset does not need a bump (docs/results-schema.md, "Versioning").
/// 2: the `preempted: ...` status, and a resumed run's rows starting at step `first_step`.
inline constexpr std::int64_t kResultsSchemaVersion = 2;

/// A root or dataset attribute: int64, float64, a UTF-8 string or a 1-D list of strings.
using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::string>>;

/// The run's `status` attribute: `running` from creation, then `ok`, `failed: <rank>: <reason>`, `diverged`, or
/// `preempted: <reason>` (stopped by a signal after a checkpoint was written: the reason names the signal, the
/// step and the checkpoint to resume from). A file still at `running` with no live job was killed.
class RunStatus {
 public:
  enum class Kind { running, ok, failed, diverged, preempted, unknown };

  static RunStatus running() { return RunStatus(Kind::running, -1, {}); }
  static RunStatus ok() { return RunStatus(Kind::ok, -1, {}); }
  static RunStatus diverged() { return RunStatus(Kind::diverged, -1, {}); }
  static RunStatus preempted(std::string reason) { return RunStatus(Kind::preempted, -1, std::move(reason)); }
  /// `failed: <rank>: <reason>`; rank is the rank that raised the error (-1 if not known).
  static RunStatus failed(int rank, std::string reason) {
    return RunStatus(Kind::failed, rank, std::move(reason));
  }
  /// Reads the attribute's text back; text this version does not know gives Kind::unknown.
  static RunStatus parse(std::string_view text);

  Kind kind() const noexcept { return kind_; }
  int failed_rank() const noexcept { return rank_; }
  const std::string& reason() const noexcept { return reason_; }
  /// The attribute text.
  std::string text() const;

 private:
  RunStatus(Kind k, int rank, std::string reason) : kind_(k), rank_(rank), reason_(std::move(reason)) {}
  Kind kind_;
  int rank_;
  std::string reason_;  // failed: the reason; unknown: the whole text
};

/// The provenance a run knows when it starts; create() writes it as root attributes together with
/// what the writer finds itself (schema_version, hzpbench_version, git_sha, git_dirty,
/// build_options, library versions as `lib.<name>`, start_time, status = running).
struct RunInfo {
  std::vector<std::string> argv;  ///< the command line, one element per argument
  std::string config_toml;        ///< the resolved configuration (ResolvedConfig::to_toml)
  std::int64_t world_size = 1;
  std::string topology;         ///< human-readable node map, e.g. RankMesh::describe()
  std::string backend = "cpu";  ///< "cpu" or "cuda"
  std::string cpu_model;        ///< empty = read from /proc/cpuinfo
  std::string gpu_model;        ///< empty = CUDA device 0's name, or "none"
  /// Thread settings, written as `threads.<key>` (e.g. {"openblas", "1"}, {"comm_threads", "2"}).
  std::vector<std::pair<std::string, AttrValue>> threads;
  /// Data provenance, written as `data.<key>` (e.g. {"source", "synthetic"}, {"sha256", "..."}).
  std::vector<std::pair<std::string, AttrValue>> data;
};

/// Name, units and meaning of a growing series: the caller's definition of one dataset, passed to
/// every append (keep them as constants). Names are '/'-separated paths of [A-Za-z0-9_.-] segments,
/// e.g. "steps/loss", "ranks/step_time_s", "comm/all_gather/intra/bytes"; groups are made as needed.
struct SeriesSpec {
  std::string name;
  std::string units;        ///< "s", "bytes", "nats/token", "1" for dimensionless
  std::string description;  ///< one sentence, stored as the dataset's `description` attribute
};

/// Writes one run's results file. All calls must come from the thread that created the writer (HDF5
/// is not built thread-safe here; checked, PreconditionError otherwise). Errors throw hzp::IoError
/// (paths), hzp::PreconditionError (misuse: names, shapes, order) or hzp::Hdf5Error (the library),
/// each naming the file and object. Not copyable; movable.
class ResultsWriter {
 public:
  /// Creates `path` (and missing parent directories), writes the root attributes and flushes, so the
  /// file opens from the first moment. An existing `path` is refused (IoError naming it and the fix:
  /// --force or another --out) unless `force`; a file another process writes is refused even then, before
  /// anything touches it. With `force` over an existing file the new file is written under a temporary
  /// name beside it (`<path>.partial-<pid>`) and replaces it in one rename at publish(), or at finish()
  /// with a status other than failed; until then the old file is untouched. The parent directory must be
  /// writable (IoError otherwise).
  ///
  /// The writer holds its own lock on the file (seen by live_writer_of in results_guard.hpp), checks at
  /// every flush that the path still names its file (a replaced file: its bytes are saved beside the path
  /// as `<path>.displaced-<pid>`, marked failed, and the flush throws IoError), and keeps disk reserved
  /// past the file's end so that a full file system ends the run (IoError from the flush) while the
  /// failed status and a last flush still fit.
  static ResultsWriter create(const std::filesystem::path& path, const RunInfo& info, bool force);

  ResultsWriter(ResultsWriter&&) noexcept;
  ResultsWriter& operator=(ResultsWriter&&) noexcept;
  /// Flushes and closes without touching `status`: a run that never called finish() stays `running`,
  /// which is how readers recognise a run that did not end normally. Never throws (errors go to stderr).
  ~ResultsWriter();

  /// Where the file is now: final_path(), or its temporary name until publish().
  const std::filesystem::path& path() const noexcept;
  /// The path create() was given.
  const std::filesystem::path& final_path() const noexcept;
  /// Moves a file written under a temporary name over the file it replaces (no-op otherwise). IoError
  /// when that file has a live writer again, or the rename fails; the results then stay at path().
  void publish();
  /// Where the bytes of a file replaced under the run were saved (empty unless that happened).
  const std::filesystem::path& displaced_copy() const noexcept;
  /// Whether the writer holds its lock (false on a file system without OFD locks) and keeps a disk
  /// reserve (false where fallocate is not supported: a full disk can then cost the last flush).
  bool locked() const noexcept;
  bool reserving() const noexcept;

  // ---- root attributes ---------------------------------------------------------------------------
  /// Sets (or replaces) a root attribute, e.g. "entropy_floor", "warmup_steps". Names the writer owns
  /// (schema_version, status, start_time, end_time, ...) are refused: use set_status()/finish().
  void set_attribute(std::string_view name, const AttrValue& value);
  /// Sets `data.<key>` (data provenance) after creation, e.g. once a file hash is known.
  void set_data_provenance(std::string_view key, const AttrValue& value);

  // ---- growing series: one row per step ----------------------------------------------------------
  /// Appends one value to a 1-D `[step]` series (float64 or int64), creating it on first use with
  /// spec's units and description. Later appends must keep the same dtype and units.
  void append(const SeriesSpec& spec, double value);
  void append(const SeriesSpec& spec, std::int64_t value);
  /// Appends one row to a 2-D `[step, width]` series (e.g. width = world size), creating it on first
  /// use. Every row must have the first row's width (PreconditionError naming both otherwise).
  void append_row(const SeriesSpec& spec, std::span<const double> row);
  void append_row(const SeriesSpec& spec, std::span<const std::int64_t> row);
  /// Rows appended to a series so far (0 if it does not exist).
  std::int64_t rows(std::string_view name) const;

  // ---- fixed-shape arrays ------------------------------------------------------------------------
  /// Writes a row-major array of the given shape (e.g. memory/model_state_bytes [rank, component]).
  /// Writing the same name again overwrites it if dtype and shape match (PreconditionError otherwise).
  void write_array(const SeriesSpec& spec, std::span<const std::int64_t> shape, std::span<const double> data);
  void write_array(const SeriesSpec& spec, std::span<const std::int64_t> shape,
                   std::span<const std::int64_t> data);
  /// Sets an attribute on an existing dataset, e.g. ("memory/model_state_bytes", "components",
  /// {"param", "grad", "master", "m", "v"}).
  void set_dataset_attribute(std::string_view dataset, std::string_view name, const AttrValue& value);

  // ---- tensor dumps (--dump-tensors) -------------------------------------------------------------
  /// Writes `tensors/step_<step>/<name>` as float32 with the given shape; `source_dtype` records what
  /// the tensor was before widening ("fp32", "bf16"). The same step and name twice is refused.
  void dump_tensor(std::int64_t step, std::string_view name, std::span<const std::int64_t> shape,
                   std::span<const float> data, std::string_view source_dtype = "fp32");

  // ---- durability and status ---------------------------------------------------------------------
  /// H5Fflush: everything written so far reaches the OS, so it survives a killed process (not a
  /// crashed node: no fsync). Also updates `last_flush_time`. Call after every step, or use
  /// flush_if_due(output.flush_s).
  void flush();
  /// Flushes if at least `interval_s` seconds passed since the last flush; returns whether it did.
  bool flush_if_due(double interval_s);
  /// Sets `status` and flushes, e.g. failed(...) before the job is aborted. `running` is accepted only
  /// while the status is still running (a finished verdict is never undone).
  void set_status(const RunStatus& status);
  /// Writes `end_time` and the final `status` (not `running`), flushes and closes; publishes first unless
  /// the status is failed. Every later call except path() and the destructor throws PreconditionError.
  void finish(const RunStatus& status);
  bool finished() const noexcept;

 private:
  struct Impl;
  explicit ResultsWriter(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

/// "2024-05-01T12:34:56Z" (ISO-8601, UTC, whole seconds) for a Unix time in seconds.
std::string iso8601_utc(double unix_seconds);

}  // namespace hzp::harness
