// The results file writer (see results_file.hpp and docs/results-schema.md): creation with the
// path checks users hit (existing file, unwritable directory, a live file under --force), root provenance
// attributes, growing series, fixed arrays, tensor dumps, flush and status, and what keeps the file from
// being lost (results_guard.hpp: its lock, the replaced-file check, the disk reserve; a --force run written
// under a temporary name until publish()). All HDF5 goes through h5_handle.hpp.
#include "hzp/harness/results_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <thread>

#include "h5_attributes.hpp"
#include "h5_handle.hpp"
#include "hzp/core/build_info.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"
#include "hzp/harness/version_report.hpp"
#include "results_guard.hpp"
#include "results_names.hpp"

extern char** environ;

namespace hzp::harness {
namespace {
// Disk kept allocated past the file's end, on top of twice the largest growth between two flushes: room
// for the failed status, end_time and a final flush when the file system fills (a few KiB), with margin
// for HDF5's metadata cache writing between flushes.
constexpr std::int64_t kReserveBytes = std::int64_t{1} << 20;
}  // namespace

// ---- RunStatus -------------------------------------------------------------------------------------

RunStatus RunStatus::parse(std::string_view text) {
  if (text == "running") return running();
  if (text == "ok") return ok();
  if (text == "diverged") return diverged();
  constexpr std::string_view kPreempted = "preempted: ";
  if (text.substr(0, kPreempted.size()) == kPreempted) return preempted(std::string(text.substr(kPreempted.size())));
  constexpr std::string_view kFailed = "failed: ";
  if (text.substr(0, kFailed.size()) == kFailed) {
    std::string_view rest = text.substr(kFailed.size());
    const auto colon = rest.find(": ");
    int rank = -1;
    try {
      rank = colon == std::string_view::npos ? -1 : std::stoi(std::string(rest.substr(0, colon)));
    } catch (const std::exception&) {
      rank = -1;
    }
    std::string reason(colon == std::string_view::npos ? rest : rest.substr(colon + 2));
    return failed(rank, std::move(reason));
  }
  return RunStatus(Kind::unknown, -1, std::string(text));
}

std::string RunStatus::text() const {
  switch (kind_) {
    case Kind::running: return "running";
    case Kind::ok: return "ok";
    case Kind::diverged: return "diverged";
    case Kind::preempted: return "preempted: " + reason_;
    case Kind::failed: return "failed: " + std::to_string(rank_) + ": " + reason_;
    case Kind::unknown: return reason_;
  }
  return reason_;
}

std::string iso8601_utc(double unix_seconds) {
  const auto t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- the writer -----------------------------------------------------------------------------------

namespace {

/// One growing series: its open dataset (kept open, so an append is an extend and one write) and
/// what the first append fixed.
struct Series {
  h5::Handle dataset;
  bool is_int = false;
  std::int64_t width = 0;  // 0 = 1-D [step]; otherwise [step, width]
  std::int64_t rows = 0;
  std::string units;
};

// Environment variables that change how a run behaves or where it ran (threads, MPI transport,
// devices, the Slurm job); recorded as env.<NAME>. A fixed list of prefixes, so nothing unrelated
// (and no credential) from the user's environment lands in a file that gets shared.
bool recorded_env_var(std::string_view name) {
  // clang-format off
  static constexpr std::string_view kPrefixes[] = {
      "OMP_", "OPENBLAS_", "MPICH_", "MPIR_CVAR_", "UCX_", "HYDRA_", "NCCL_", "CUDA_VISIBLE_DEVICES",
      "HDF5_", "HZP_", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_NTASKS",
      "SLURM_NNODES", "SLURM_JOB_NODELIST"};
  // clang-format on
  for (std::string_view p : kPrefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

// Root attributes only the writer sets (through create, set_status, finish, flush).
bool writer_owned_attribute(std::string_view name) {
  for (std::string_view r : kWriterOwnedAttributes) {
    if (name == r) return true;
  }
  return name.substr(0, 4) == "lib." || name.substr(0, 4) == "env.";
}

// Creates a probe file in `dir` and removes it: the honest test of "can this process create files
// here" (access(2) says yes to root on a read-only sysfs, and permission bits say nothing about ACLs).
void require_writable_directory(const std::filesystem::path& dir, const std::filesystem::path& file) {
  const std::filesystem::path probe = dir / (".hzp-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) {
    const int err = errno;
    HZP_THROW(IoError, "cannot write results file '", file.string(), "': its directory '", dir.string(),
              "' is not writable (", std::strerror(err),
              "); choose another --out or make the directory writable");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

struct ResultsWriter::Impl {
  std::filesystem::path path;         // where the file is now: final_path, or a temporary name under --force
  std::filesystem::path final_path;   // where it belongs (publish() moves it there)
  h5::Handle file;
  std::unique_ptr<FileGuard> guard;   // the lock, the replaced-file check and the disk reserve
  std::int64_t flushed_size = 0;      // the file's size after the last flush
  std::int64_t largest_growth = 0;    // the most it grew between two flushes
  std::filesystem::path displaced;    // set when the path was found naming another file: where the copy is
  bool out_of_room = false;           // keep_room found the file system full: the run is winding down
  std::map<std::string, Series, std::less<>> series;
  std::map<std::string, std::pair<bool, std::vector<hsize_t>>, std::less<>> arrays;  // is_int, shape
  std::string status = "running";
  std::thread::id owner = std::this_thread::get_id();
  double last_flush_wall = 0.0;
  bool finished = false;

  std::string where() const { return "results file '" + path.string() + "'"; }
  std::string where(std::string_view object) const {
    return "'" + std::string(object) + "' in results file '" + path.string() + "'";
  }

  void check_usable(const char* op) const {
    HZP_CHECK(std::this_thread::get_id() == owner, "ResultsWriter::", op, " on ", where(),
              " called from another thread than the one that created it; HDF5 is not thread-safe here, so "
              "every call must come from the writer's thread");
    HZP_CHECK(!finished, "ResultsWriter::", op, " on ", where(), " after finish(); the file is closed");
  }

  void write_root(std::string_view name, const AttrValue& v) {
    h5::write_attribute(file.get(), name, v, where());
  }

  /// Makes every group on the way to `name` and refuses a path through a dataset, with a message
  /// (HDF5's own would be "component not found").
  void prepare_parents(std::string_view name) {
    std::size_t pos = 0;
    while ((pos = name.find('/', pos)) != std::string_view::npos) {
      const std::string group(name.substr(0, pos));
      const h5::ObjectKind kind = h5::object_kind(file.get(), group, where());
      if (kind != h5::ObjectKind::absent) {
        HZP_CHECK(kind == h5::ObjectKind::group, "cannot create ", where(name), ": '", group,
                  "' is a dataset, not a group; choose a name that does not nest under an existing dataset");
      } else {
        h5::Handle g =
            HZP_H5_OWN(H5Gcreate2(file.get(), group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       "creating group ", where(group));
      }
      ++pos;
    }
  }

  bool exists(std::string_view name) {
    return h5::object_kind(file.get(), std::string(name), where()) != h5::ObjectKind::absent;
  }

  void describe_dataset(hid_t ds, const SeriesSpec& spec) {
    h5::write_attribute(ds, "units", spec.units, where(spec.name));
    h5::write_attribute(ds, "description", spec.description, where(spec.name));
  }

  Series& series_for(const SeriesSpec& spec, bool is_int, std::int64_t width) {
    auto it = series.find(spec.name);
    if (it != series.end()) {
      Series& s = it->second;
      HZP_CHECK(s.is_int == is_int, "series ", where(spec.name), " holds ", s.is_int ? "int64" : "float64",
                " values; this append passes ", is_int ? "int64" : "float64");
      HZP_CHECK(s.width == width, "series ", where(spec.name), " has rows of ",
                s.width == 0 ? std::string("one value ([step])")
                             : std::to_string(s.width) + " values ([step, " + std::to_string(s.width) + "])",
                "; this append passes ",
                width == 0 ? std::string("one value") : std::to_string(width) + " values",
                ". Every row of a series has the first row's length");
      HZP_CHECK(s.units == spec.units, "series ", where(spec.name), " is in '", s.units,
                "'; this append says '", spec.units, "'");
      return s;
    }
    check_series_name(spec.name, "series");
    HZP_CHECK(!exists(spec.name), "cannot start series ", where(spec.name),
              ": an array or group of that name already exists");
    prepare_parents(spec.name);

    // Chunks of ~4 KiB: each flush rewrites the step's partial chunk, so small chunks keep a flush
    // cheap, and a killed run loses at most the rows after the last flush, never a whole chunk.
    const hsize_t cols = width == 0 ? 1 : static_cast<hsize_t>(width);
    const hsize_t chunk_rows = std::max<hsize_t>(1, 512 / cols);
    const int rank = width == 0 ? 1 : 2;
    const hsize_t dims[2] = {0, cols};
    const hsize_t maxdims[2] = {H5S_UNLIMITED, cols};
    const hsize_t chunk[2] = {chunk_rows, cols};
    h5::Handle space =
        HZP_H5_OWN(H5Screate_simple(rank, dims, maxdims), "making the shape of ", where(spec.name));
    h5::Handle dcpl = HZP_H5_OWN(H5Pcreate(H5P_DATASET_CREATE), "making a dataset property list");
    HZP_H5_CHECK(H5Pset_chunk(dcpl.get(), rank, chunk), "chunking ", where(spec.name));
    // A row whose extent reached the disk but whose values did not (a kill between HDF5's metadata
    // and data writes) reads as NaN / -1 instead of a plausible 0.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::int64_t minus_one = -1;
    HZP_H5_CHECK(is_int ? H5Pset_fill_value(dcpl.get(), H5T_NATIVE_INT64, &minus_one)
                        : H5Pset_fill_value(dcpl.get(), H5T_NATIVE_DOUBLE, &nan),
                 "setting the fill value of ", where(spec.name));
    h5::Handle ds =
        HZP_H5_OWN(H5Dcreate2(file.get(), spec.name.c_str(), is_int ? H5T_STD_I64LE : H5T_IEEE_F64LE,
                              space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                   "creating series ", where(spec.name));
    describe_dataset(ds.get(), spec);
    Series s;
    s.dataset = std::move(ds);
    s.is_int = is_int;
    s.width = width;
    s.units = spec.units;
    return series.emplace(spec.name, std::move(s)).first->second;
  }

  void append_values(const SeriesSpec& spec, bool is_int, std::int64_t width, const void* values) {
    check_usable("append");
    Series& s = series_for(spec, is_int, width);
    const hsize_t cols = width == 0 ? 1 : static_cast<hsize_t>(width);
    const hsize_t new_dims[2] = {static_cast<hsize_t>(s.rows) + 1, cols};
    HZP_H5_CHECK(H5Dset_extent(s.dataset.get(), new_dims), "growing series ", where(spec.name));
    h5::Handle fspace = HZP_H5_OWN(H5Dget_space(s.dataset.get()), "reading the shape of ", where(spec.name));
    const hsize_t start[2] = {static_cast<hsize_t>(s.rows), 0};
    const hsize_t count[2] = {1, cols};
    HZP_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr),
                 "selecting row ", s.rows, " of ", where(spec.name));
    h5::Handle mspace = HZP_H5_OWN(H5Screate_simple(1, &cols, nullptr), "making a row's shape");
    HZP_H5_CHECK(H5Dwrite(s.dataset.get(), is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, mspace.get(),
                          fspace.get(), H5P_DEFAULT, values),
                 "appending row ", s.rows, " to ", where(spec.name));
    ++s.rows;
  }

  void write_fixed(const SeriesSpec& spec, std::span<const std::int64_t> shape, bool is_int, std::size_t n,
                   const void* data) {
    check_usable("write_array");
    check_series_name(spec.name, "array");
    HZP_CHECK(!shape.empty() && shape.size() <= 8, "array ", where(spec.name),
              " needs 1 to 8 dimensions, got ", shape.size());
    std::vector<hsize_t> dims;
    std::size_t total = 1;
    for (std::int64_t d : shape) {
      HZP_CHECK(d >= 0, "array ", where(spec.name), " has a negative dimension ", d);
      dims.push_back(static_cast<hsize_t>(d));
      total *= static_cast<std::size_t>(d);
    }
    HZP_CHECK(total == n, "array ", where(spec.name), " has shape ", shape_text(shape), " = ", total,
              " elements but ", n, " values were given");
    HZP_CHECK(series.find(spec.name) == series.end(), "cannot write array ", where(spec.name),
              ": a growing series of that name exists");
    h5::Handle ds;
    if (auto it = arrays.find(spec.name); it != arrays.end()) {
      HZP_CHECK(it->second.first == is_int && it->second.second == dims, "array ", where(spec.name),
                " was written before as ", it->second.first ? "int64 " : "float64 ",
                dims_text(it->second.second), "; rewriting it as ", is_int ? "int64 " : "float64 ",
                dims_text(dims), " is refused (an array keeps its dtype and shape)");
      ds = HZP_H5_OWN(H5Dopen2(file.get(), spec.name.c_str(), H5P_DEFAULT), "opening ", where(spec.name));
    } else {
      HZP_CHECK(!exists(spec.name), "cannot write array ", where(spec.name),
                ": an object of that name exists");
      prepare_parents(spec.name);
      h5::Handle space = HZP_H5_OWN(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                    "making the shape of ", where(spec.name));
      ds = HZP_H5_OWN(H5Dcreate2(file.get(), spec.name.c_str(), is_int ? H5T_STD_I64LE : H5T_IEEE_F64LE,
                                 space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                      "creating array ", where(spec.name));
      arrays.emplace(spec.name, std::make_pair(is_int, dims));
    }
    if (n > 0)
      HZP_H5_CHECK(H5Dwrite(ds.get(), is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                            H5P_DEFAULT, data),
                   "writing array ", where(spec.name));
    describe_dataset(ds.get(), spec);
  }

  void do_flush() {
    check_still_ours();
    write_root("last_flush_unix_s", unix_seconds());
    HZP_H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "flushing ", where());
    last_flush_wall = wall_seconds();
    const std::int64_t size = guard->size();
    // The first flush (creation) says nothing about how much a step adds.
    if (flushed_size > 0) largest_growth = std::max(largest_growth, size - flushed_size);
    flushed_size = size;
    keep_room(0);
  }

  /// Keeps the reserve past the file's end (and `extra` bytes about to be written) allocated; a file
  /// system without room ends the run here, while the reserve still holds the failed status and the flush.
  void keep_room(std::int64_t extra) {
    // Once full, the writes left are the failure path's (queued rows, status, end time): the reserve
    // taken at the last good flush holds them, so they are not refused again.
    if (out_of_room) return;
    const std::int64_t want = kReserveBytes + 2 * largest_growth + extra;
    if (guard->reserve(want)) return;
    out_of_room = true;
    const std::int64_t free = guard->free_bytes();
    HZP_THROW(IoError, "the file system holding ", where(), " is full (", free < 0 ? std::string("?") : std::to_string(free),
              " bytes free, ", want, " needed to go on writing safely): the run stops here, and the file keeps every "
              "step flushed so far. Fix: free space there, or --out a file system with room");
  }

  /// A file moved, replaced or removed under a live run would take every later row where nobody can read
  /// it: its bytes so far are saved beside the path, marked failed, and the run stops.
  void check_still_ours() {
    if (!displaced.empty() || guard->still_at(path)) return;
    const std::filesystem::path saved = path.string() + ".displaced-" + std::to_string(::getpid());
    displaced = saved;
    const std::string reason = "results file '" + path.string() +
                               "' was replaced or removed by another process while this run was writing it";
    // The writer is rank 0's (the harness writes from rank 0 only).
    write_root("status", RunStatus::failed(0, reason + "; this copy holds what the run wrote until then").text());
    HZP_H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "flushing ", where());
    guard->copy_to(saved);
    HZP_THROW(IoError, reason, ". Everything it wrote is saved in '", saved.string(),
              "' (status failed). Fix: give each run its own --out");
  }

  /// Moves a file written under a temporary name (--force over an existing file) to its place, replacing
  /// the old one in one rename. Refused if the old file has a live writer again.
  void publish() {
    if (path == final_path) return;
    if (const std::optional<std::string> who = live_writer_of(final_path))
      HZP_THROW(IoError, "cannot replace results file '", final_path.string(), "': ", *who,
                " has it open now; this run's results stay in '", path.string(), "'");
    std::error_code ec;
    std::filesystem::rename(path, final_path, ec);
    if (ec)
      HZP_THROW(IoError, "cannot move '", path.string(), "' over results file '", final_path.string(),
                "': ", ec.message(), "; this run's results stay in '", path.string(), "'");
    path = final_path;
  }

  /// Closes every dataset, then the file (whose close must be checked: it writes what is left), then gives
  /// the disk reserve back and drops the lock.
  void close() {
    series.clear();
    const herr_t rc = file.close_checked();
    guard->release();
    if (rc < 0) HZP_THROW(Hdf5Error, "closing ", where(), " failed");
  }

  void write_provenance(const RunInfo& info) {
    write_root("schema_version", kResultsSchemaVersion);
    write_root("hzpbench_version", std::string(hzpbench_version()));
    write_root("git_sha", std::string(git_sha()));
    write_root("git_dirty", std::int64_t{git_dirty() ? 1 : 0});
    write_root("build_options", build_options());
    write_root("argv", info.argv);
    write_root("config", info.config_toml);
    write_root("world_size", info.world_size);
    write_root("topology", info.topology);
    write_root("backend", info.backend);
    write_root("host", host_name());
    std::string cpu = info.cpu_model;
    std::string gpu = info.gpu_model;
    for (const auto& [k, v] : version_facts()) {
      if (k == "cpu" && cpu.empty()) cpu = v;
      // Facts with their own attribute above, or not a library's version, stay out of lib.*.
      if (k == "hzpbench" || k == "git_sha" || k == "git_dirty" || k == "build" || k == "cpu" ||
          k == "cuda_devices")
        continue;
      write_root("lib." + k, v);
    }
    if (gpu.empty()) gpu = cuda_device_count() > 0 ? cuda_device_name(0) : "none";
    write_root("cpu_model", cpu);
    write_root("gpu_model", gpu);
    for (const auto& [k, v] : info.threads) write_root("threads." + checked_key(k), v);
    for (const auto& [k, v] : info.data) write_root("data." + checked_key(k), v);
    for (char** e = environ; e && *e; ++e) {
      const std::string_view kv(*e);
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos || !recorded_env_var(kv.substr(0, eq))) continue;
      write_root("env." + std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
    write_root("start_time", iso8601_utc(unix_seconds()));
    write_root("end_time", std::string());
    write_root("status", status);
  }

  std::string checked_key(std::string_view key) {
    check_attribute_name(key);
    return std::string(key);
  }
};

ResultsWriter::ResultsWriter(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
ResultsWriter::ResultsWriter(ResultsWriter&&) noexcept = default;
ResultsWriter& ResultsWriter::operator=(ResultsWriter&&) noexcept = default;

ResultsWriter::~ResultsWriter() {
  if (!impl_ || impl_->finished || !impl_->file) return;
  try {
    impl_->do_flush();
    impl_->close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hzpbench: warning: closing %s: %s\n", impl_->where().c_str(), e.what());
  }
}

ResultsWriter ResultsWriter::create(const std::filesystem::path& path, const RunInfo& info, bool force) {
  namespace fs = std::filesystem;
  h5::quiet_errors();
  HZP_CHECK(!path.empty(), "the results file path is empty");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  const bool replacing = fs::exists(st);
  if (replacing) {
    if (fs::is_directory(st))
      HZP_THROW(IoError, "results file '", path.string(), "' is a directory; give a file name with --out");
    if (!force)
      HZP_THROW(IoError, "results file '", path.string(),
                "' already exists; pass --force to overwrite it, or choose another --out");
    // Checked before anything touches the path (HDF5's own create would truncate first and then find the
    // lock): --force never replaces the file of a live run.
    if (const std::optional<std::string> who = live_writer_of(path))
      HZP_THROW(IoError, "cannot replace results file '", path.string(), "': ", *who,
                " has it open (a run still writing it?); nothing was changed. Fix: choose another --out, or "
                "wait for that run to end");
  }
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec)
    HZP_THROW(IoError, "cannot create directory '", parent.string(), "' for results file '", path.string(),
              "': ", ec.message(), "; choose another --out");
  require_writable_directory(parent, path);
  // Checked before the file exists, so that a bad key leaves nothing behind.
  for (const auto& kv : info.threads) check_attribute_name(kv.first);
  for (const auto& kv : info.data) check_attribute_name(kv.first);

  auto impl = std::make_unique<Impl>();
  impl->final_path = path;
  // --force over an existing file: the new run is written beside it and moved over it by publish(), once
  // it has started cleanly, so a run that fails before that leaves the old results in place.
  impl->path = replacing ? fs::path(path.string() + ".partial-" + std::to_string(::getpid())) : path;
  if (replacing) fs::remove(impl->path, ec);  // a leftover of a dead process that had our pid
  h5::Handle fapl = HZP_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), "making a file access property list");
  HZP_H5_CHECK(H5Pset_fapl_sec2(fapl.get()), "selecting the sec2 driver for ", impl->where());
  // Never the v110 ("latest") structures SWMR uses: with them a killed writer leaves a file HDF5
  // refuses to open until h5clear (docs/environment.md, HDF5). Earliest-to-1.8 also keeps old readers working.
  HZP_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_EARLIEST, H5F_LIBVER_V18),
               "choosing the file format of ", impl->where());
  // Never H5F_ACC_TRUNC: the path is new (the final one, or the temporary one beside an existing file).
  const hid_t id = H5Fcreate(impl->path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get());
  if (id < 0) {
    const std::vector<std::string> stack = h5::take_error_stack();
    std::string all;
    for (const std::string& s : stack) all += s + "\n";
    if (h5::stack_says_locked(stack))
      HZP_THROW(IoError, "cannot create results file '", path.string(),
                "': another process has it open (a run still writing it?); choose another --out");
    if (all.find("exist") != std::string::npos)
      HZP_THROW(IoError, "results file '", path.string(),
                "' already exists (another run created it just now?); choose another --out");
    HZP_THROW(Hdf5Error, "H5Fcreate failed: ", h5::summarize_error_stack(stack), "; while creating ",
              impl->where());
  }
  impl->file = h5::Handle(id);
  try {
    impl->guard = std::make_unique<FileGuard>(impl->path);
    impl->write_provenance(info);
    impl->do_flush();
  } catch (...) {
    // A half-written file would block the retry ("already exists"); it holds nothing worth keeping.
    impl->file.reset();
    if (impl->guard) impl->guard->release();
    fs::remove(impl->path, ec);
    throw;
  }
  return ResultsWriter(std::move(impl));
}

const std::filesystem::path& ResultsWriter::path() const noexcept { return impl_->path; }
const std::filesystem::path& ResultsWriter::final_path() const noexcept { return impl_->final_path; }
const std::filesystem::path& ResultsWriter::displaced_copy() const noexcept { return impl_->displaced; }
bool ResultsWriter::locked() const noexcept { return impl_->guard && impl_->guard->locked(); }
bool ResultsWriter::reserving() const noexcept { return impl_->guard && impl_->guard->reserving(); }

void ResultsWriter::publish() {
  impl_->check_usable("publish");
  impl_->publish();
}
bool ResultsWriter::finished() const noexcept { return impl_->finished; }

void ResultsWriter::set_attribute(std::string_view name, const AttrValue& value) {
  impl_->check_usable("set_attribute");
  check_attribute_name(name);
  HZP_CHECK(!writer_owned_attribute(name), "root attribute '", name, "' of ", impl_->where(),
            " is set by the writer itself (use set_status()/finish() for status); choose another name");
  impl_->write_root(name, value);
}

void ResultsWriter::set_data_provenance(std::string_view key, const AttrValue& value) {
  impl_->check_usable("set_data_provenance");
  impl_->write_root("data." + impl_->checked_key(key), value);
}

void ResultsWriter::append(const SeriesSpec& spec, double value) {
  impl_->append_values(spec, false, 0, &value);
}
void ResultsWriter::append(const SeriesSpec& spec, std::int64_t value) {
  impl_->append_values(spec, true, 0, &value);
}

void ResultsWriter::append_row(const SeriesSpec& spec, std::span<const double> row) {
  HZP_CHECK(!row.empty(), "an empty row cannot be appended to '", spec.name, "'");
  impl_->append_values(spec, false, static_cast<std::int64_t>(row.size()), row.data());
}
void ResultsWriter::append_row(const SeriesSpec& spec, std::span<const std::int64_t> row) {
  HZP_CHECK(!row.empty(), "an empty row cannot be appended to '", spec.name, "'");
  impl_->append_values(spec, true, static_cast<std::int64_t>(row.size()), row.data());
}

std::int64_t ResultsWriter::rows(std::string_view name) const {
  auto it = impl_->series.find(name);
  return it == impl_->series.end() ? 0 : it->second.rows;
}

void ResultsWriter::write_array(const SeriesSpec& spec, std::span<const std::int64_t> shape,
                                std::span<const double> data) {
  impl_->write_fixed(spec, shape, false, data.size(), data.data());
}
void ResultsWriter::write_array(const SeriesSpec& spec, std::span<const std::int64_t> shape,
                                std::span<const std::int64_t> data) {
  impl_->write_fixed(spec, shape, true, data.size(), data.data());
}

void ResultsWriter::set_dataset_attribute(std::string_view dataset, std::string_view name,
                                          const AttrValue& value) {
  impl_->check_usable("set_dataset_attribute");
  check_attribute_name(name);
  const std::string ds_name(dataset);
  HZP_CHECK(!ds_name.empty() && impl_->exists(ds_name), "cannot set attribute '", name, "' on ",
            impl_->where(dataset), ": no such dataset (write it first)");
  h5::Handle ds =
      HZP_H5_OWN(H5Oopen(impl_->file.get(), ds_name.c_str(), H5P_DEFAULT), "opening ", impl_->where(dataset));
  h5::write_attribute(ds.get(), name, value, impl_->where(dataset));
}

void ResultsWriter::dump_tensor(std::int64_t step, std::string_view name, std::span<const std::int64_t> shape,
                                std::span<const float> data, std::string_view source_dtype) {
  Impl& m = *impl_;
  m.check_usable("dump_tensor");
  HZP_CHECK(step >= 0, "tensor dump step must be >= 0, got ", step);
  const std::string full = "tensors/step_" + std::to_string(step) + "/" + std::string(name);
  check_series_name(full, "tensor");
  std::vector<hsize_t> dims;
  std::size_t total = 1;
  for (std::int64_t d : shape) {
    HZP_CHECK(d >= 0, "tensor ", m.where(full), " has a negative dimension ", d);
    dims.push_back(static_cast<hsize_t>(d));
    total *= static_cast<std::size_t>(d);
  }
  HZP_CHECK(!dims.empty() && total == data.size(), "tensor ", m.where(full), " has shape ", shape_text(shape),
            " = ", total, " elements but ", data.size(), " values were given");
  HZP_CHECK(!m.exists(full), "tensor ", m.where(full), " was already dumped at this step");
  m.keep_room(static_cast<std::int64_t>(total * sizeof(float)));
  m.prepare_parents(full);
  h5::Handle space = HZP_H5_OWN(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                "making the shape of ", m.where(full));
  h5::Handle ds = HZP_H5_OWN(H5Dcreate2(m.file.get(), full.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                        H5P_DEFAULT, H5P_DEFAULT),
                             "creating tensor ", m.where(full));
  if (total > 0)
    HZP_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
                 "writing tensor ", m.where(full));
  h5::write_attribute(ds.get(), "source_dtype", std::string(source_dtype), m.where(full));
  h5::write_attribute(ds.get(), "step", step, m.where(full));
}

void ResultsWriter::flush() {
  impl_->check_usable("flush");
  impl_->do_flush();
}

bool ResultsWriter::flush_if_due(double interval_s) {
  impl_->check_usable("flush_if_due");
  if (wall_seconds() - impl_->last_flush_wall < interval_s) return false;
  impl_->do_flush();
  return true;
}

void ResultsWriter::set_status(const RunStatus& status) {
  Impl& m = *impl_;
  m.check_usable("set_status");
  HZP_CHECK(status.kind() != RunStatus::Kind::unknown, "status '", status.text(),
            "' is not one of running, ok, ", "failed: <rank>: <reason>, diverged");
  HZP_CHECK(status.kind() != RunStatus::Kind::running || m.status == "running", "status of ", m.where(),
            " is '", m.status, "'; a finished verdict cannot go back to 'running'");
  m.status = status.text();
  m.write_root("status", m.status);
  m.do_flush();
}

void ResultsWriter::finish(const RunStatus& status) {
  Impl& m = *impl_;
  m.check_usable("finish");
  HZP_CHECK(status.kind() != RunStatus::Kind::running && status.kind() != RunStatus::Kind::unknown,
            "finish() of ", m.where(),
            " needs a final status (ok, failed: <rank>: <reason> or diverged), got '", status.text(), "'");
  // A run that ran (ok, or diverged: a result too) takes the place of the file it replaces; a failed one
  // leaves the old results where they were and stays beside them under its temporary name.
  if (status.kind() != RunStatus::Kind::failed) m.publish();
  m.status = status.text();
  m.write_root("end_time", iso8601_utc(unix_seconds()));
  m.write_root("status", m.status);
  m.do_flush();
  m.finished = true;
  m.close();
}

}  // namespace hzp::harness
