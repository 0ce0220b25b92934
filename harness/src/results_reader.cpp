// The results file reader (see results_reader.hpp). The opening checks turn every way a file can be
// wrong (absent, empty, not HDF5, truncated, another program's HDF5, newer schema, missing
// attributes) into one message with the file name and the fix, in that order of diagnosis.
#include "hzp/harness/results_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "h5_attributes.hpp"
#include "h5_handle.hpp"
#include "hzp/core/build_info.hpp"
#include "hzp/core/error.hpp"
#include "results_names.hpp"

namespace hzp::harness {

std::string attr_to_string(const AttrValue& value) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.10g", *d);
    return buf;
  }
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  std::string joined;
  for (const std::string& s : std::get<std::vector<std::string>>(value))
    joined += (joined.empty() ? "" : " ") + s;
  return joined;
}

namespace {

// HDF5's own test (H5Fis_hdf5) takes the file lock, so it answers "no" for the file of a live run;
// this reads the signature where the format puts it: offset 0, then 512, 1024, 2048, ... (after a
// user block).
bool has_hdf5_signature(std::ifstream& in) {
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  for (std::uint64_t off = 0; off + 8 <= size; off = off == 0 ? 512 : off * 2) {
    char buf[8];
    in.seekg(static_cast<std::streamoff>(off));
    if (!in.read(buf, 8)) return false;
    if (std::memcmp(buf, kSignature, 8) == 0) return true;
  }
  return false;
}

}  // namespace

struct ResultsReader::Impl {
  std::filesystem::path path;
  h5::Handle file;
  std::int64_t schema = 0;

  std::string where() const { return "results file '" + path.string() + "'"; }
  std::string where(std::string_view object) const {
    return "'" + std::string(object) + "' in results file '" + path.string() + "'";
  }

  void open() {
    namespace fs = std::filesystem;
    const std::string p = path.string();
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) HZP_THROW(IoError, "results file '", p, "' does not exist; check the path");
    if (fs::is_directory(st))
      HZP_THROW(IoError, "'", p, "' is a directory, not a results file; give the path of a .h5 file");
    if (fs::file_size(path, ec) == 0 && !ec)
      HZP_THROW(DataError, "results file '", p,
                "' is empty (0 bytes): a writer killed while creating it leaves this; it holds no results, "
                "delete it");
    std::ifstream in(path, std::ios::binary);
    if (!in)
      HZP_THROW(IoError, "cannot read results file '", p, "': ", std::strerror(errno),
                "; check its permissions");
    if (!has_hdf5_signature(in))
      HZP_THROW(DataError, "'", p,
                "' is not an HDF5 file (no HDF5 signature), so it is not an hzpbench results file; "
                "give the .h5 file a run wrote (`hzpbench run --out`)");

    h5::Handle fapl = HZP_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), "making a file access property list");
    HZP_H5_CHECK(H5Pset_fapl_sec2(fapl.get()), "selecting the sec2 driver for ", where());
#if H5_VERSION_GE(1, 10, 7)
    // A live run holds its file's lock for as long as it writes; reading without the lock shows what
    // its last flush wrote, which is what `inspect` of a running job wants.
    HZP_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true), "disabling file locking for ", where());
#endif
    hid_t id = H5Fopen(p.c_str(), H5F_ACC_RDONLY, fapl.get());
    std::vector<std::string> stack;
    std::string all;
    if (id < 0) {
      stack = h5::take_error_stack();
      for (const std::string& s : stack) all += s + "\n";
      // This process has the file open already (a writer, in tests or in the harness itself), with
      // locking on: HDF5 then shares that open file and wants the same locking flag.
      if (all.find("locking flag") != std::string::npos) {
        id = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        if (id < 0) {
          stack = h5::take_error_stack();
          all.clear();
          for (const std::string& s : stack) all += s + "\n";
        }
      }
    }
    if (id < 0) {
      if (all.find("truncated") != std::string::npos)
        HZP_THROW(IoError, "results file '", p, "' is truncated (", h5::summarize_error_stack(stack),
                  "): it is shorter than its HDF5 superblock says, as after an interrupted copy, a full "
                  "disk, or a writer killed in the middle of a flush. Copy it again from its source; for a "
                  "killed writer, `h5clear --increment ",
                  p, "` (hdf5-tools) may make the steps that reached the disk readable");
      if (h5::stack_says_locked(stack))
        HZP_THROW(IoError, "results file '", p, "' is locked by another process (",
                  h5::summarize_error_stack(stack), "); wait for it to finish, or read a copy of the file");
      HZP_THROW(DataError, "results file '", p, "' is an HDF5 file that HDF5 cannot open (",
                h5::summarize_error_stack(stack), "); it is damaged. Copy it again from its source");
    }
    file = h5::Handle(id);
    validate();
  }

  void validate() {
    const std::string p = path.string();
    std::optional<AttrValue> v = h5::read_attribute(file.get(), "schema_version", where());
    if (!v)
      HZP_THROW(DataError, "'", p,
                "' is an HDF5 file but not an hzpbench results file: it has no root attribute "
                "'schema_version'; give the .h5 file a run wrote (`hzpbench run --out`)");
    const auto* version = std::get_if<std::int64_t>(&*v);
    if (!version)
      HZP_THROW(DataError, "results file '", p, "' has a schema_version that is not an integer ('",
                attr_to_string(*v), "'); it was not written by hzpbench");
    if (*version > kResultsSchemaVersion)
      HZP_THROW(DataError, "results file '", p, "' has schema_version ", *version, ", newer than the ",
                kResultsSchemaVersion, " this hzpbench (", hzpbench_version(), ", git ", git_sha(),
                ") reads; read it with the hzpbench that wrote it or a newer one (its hzpbench_version and "
                "git_sha attributes name it)");
    if (*version < 1)
      HZP_THROW(DataError, "results file '", p, "' has schema_version ", *version,
                ", which no hzpbench ever wrote (versions start at 1); it was not written by hzpbench");
    schema = *version;
    std::string missing;
    for (std::string_view name : kRequiredAttributes) {
      const htri_t e = H5Aexists(file.get(), std::string(name).c_str());
      HZP_H5_CHECK(e, "looking up attribute '", name, "' of ", where());
      if (e == 0) missing += (missing.empty() ? "'" : ", '") + std::string(name) + "'";
    }
    if (!missing.empty())
      HZP_THROW(DataError, "results file '", p, "' (schema_version ", schema,
                ") lacks the root attribute(s) ", missing,
                " that every hzpbench results file has; it was edited or written by another "
                "program. See docs/results-schema.md");
  }

  h5::Handle open_dataset(std::string_view name) const {
    const std::string n(name);
    HZP_CHECK(!n.empty(), "an empty dataset name");
    if (h5::object_kind(file.get(), n, where()) != h5::ObjectKind::dataset)
      HZP_THROW(DataError, "dataset ", where(name), " does not exist (`hzpbench inspect ", path.string(),
                "` lists those present)");
    return HZP_H5_OWN(H5Dopen2(file.get(), n.c_str(), H5P_DEFAULT), "opening ", where(name));
  }

  DatasetInfo info_of(const std::string& name) const {
    DatasetInfo info;
    info.name = name;
    h5::Handle ds = open_dataset(name);
    h5::Handle space = HZP_H5_OWN(H5Dget_space(ds.get()), "reading the shape of ", where(name));
    const int rank = H5Sget_simple_extent_ndims(space.get());
    HZP_H5_CHECK(rank, "reading the rank of ", where(name));
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    if (rank > 0)
      HZP_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "reading ", where(name));
    for (hsize_t d : dims) info.shape.push_back(static_cast<std::int64_t>(d));
    h5::Handle type = HZP_H5_OWN(H5Dget_type(ds.get()), "reading the type of ", where(name));
    const H5T_class_t cls = H5Tget_class(type.get());
    const std::size_t size = H5Tget_size(type.get());
    if (cls == H5T_FLOAT)
      info.dtype = size == 8 ? "float64" : size == 4 ? "float32" : "other";
    else if (cls == H5T_INTEGER)
      info.dtype = size == 8 ? "int64" : "other";
    else
      info.dtype = "other";
    if (auto u = h5::read_attribute(ds.get(), "units", where(name))) info.units = attr_to_string(*u);
    if (auto d = h5::read_attribute(ds.get(), "description", where(name)))
      info.description = attr_to_string(*d);
    return info;
  }

  template <typename T>
  std::vector<T> read_all(std::string_view name, hid_t mem_type, bool ints_only) const {
    h5::Handle ds = open_dataset(name);
    h5::Handle type = HZP_H5_OWN(H5Dget_type(ds.get()), "reading the type of ", where(name));
    const H5T_class_t cls = H5Tget_class(type.get());
    if (!(cls == H5T_INTEGER || (!ints_only && cls == H5T_FLOAT)))
      HZP_THROW(DataError, where(name), " holds ", cls == H5T_FLOAT ? "floating-point" : "non-numeric",
                " values; read it as ", cls == H5T_FLOAT ? "doubles" : "something else");
    h5::Handle space = HZP_H5_OWN(H5Dget_space(ds.get()), "reading the shape of ", where(name));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    HZP_H5_CHECK(n, "counting the values of ", where(name));
    std::vector<T> out(static_cast<std::size_t>(n));
    if (n > 0)
      HZP_H5_CHECK(H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), "reading ",
                   where(name));
    return out;
  }
};

ResultsReader::ResultsReader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  h5::quiet_errors();
  impl_->path = path;
  impl_->open();
}
ResultsReader::ResultsReader(ResultsReader&&) noexcept = default;
ResultsReader& ResultsReader::operator=(ResultsReader&&) noexcept = default;
ResultsReader::~ResultsReader() = default;

const std::filesystem::path& ResultsReader::path() const noexcept { return impl_->path; }
std::int64_t ResultsReader::schema_version() const { return impl_->schema; }
RunStatus ResultsReader::status() const { return RunStatus::parse(string_attribute("status")); }

std::optional<AttrValue> ResultsReader::attribute(std::string_view name) const {
  return h5::read_attribute(impl_->file.get(), name, impl_->where());
}

std::string ResultsReader::string_attribute(std::string_view name) const {
  std::optional<AttrValue> v = attribute(name);
  if (!v) HZP_THROW(DataError, impl_->where(), " has no root attribute '", name, "'");
  const auto* s = std::get_if<std::string>(&*v);
  if (!s) HZP_THROW(DataError, "root attribute '", name, "' of ", impl_->where(), " is not a string");
  return *s;
}

std::int64_t ResultsReader::int_attribute(std::string_view name) const {
  std::optional<AttrValue> v = attribute(name);
  if (!v) HZP_THROW(DataError, impl_->where(), " has no root attribute '", name, "'");
  const auto* i = std::get_if<std::int64_t>(&*v);
  if (!i) HZP_THROW(DataError, "root attribute '", name, "' of ", impl_->where(), " is not an integer");
  return *i;
}

double ResultsReader::double_attribute(std::string_view name) const {
  std::optional<AttrValue> v = attribute(name);
  if (!v) HZP_THROW(DataError, impl_->where(), " has no root attribute '", name, "'");
  if (const auto* d = std::get_if<double>(&*v)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&*v)) return static_cast<double>(*i);
  HZP_THROW(DataError, "root attribute '", name, "' of ", impl_->where(), " is not a number");
}

std::vector<std::string> ResultsReader::attribute_names() const {
  return h5::attribute_names(impl_->file.get(), impl_->where());
}

std::vector<std::pair<std::string, AttrValue>> ResultsReader::attributes_with_prefix(
    std::string_view prefix) const {
  std::vector<std::pair<std::string, AttrValue>> out;
  for (const std::string& n : attribute_names()) {
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    if (auto v = attribute(n)) out.emplace_back(n.substr(prefix.size()), std::move(*v));
  }
  return out;
}

namespace {
herr_t collect_dataset(hid_t /*obj*/, const char* name, const H5O_info_t* info, void* client) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(client)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<DatasetInfo> ResultsReader::datasets() const {
  std::vector<std::string> names;
  HZP_H5_CHECK(
      H5Ovisit2(impl_->file.get(), H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &names, H5O_INFO_BASIC),
      "listing the datasets of ", impl_->where());
  std::sort(names.begin(), names.end());
  std::vector<DatasetInfo> out;
  for (const std::string& n : names) out.push_back(impl_->info_of(n));
  return out;
}

std::optional<DatasetInfo> ResultsReader::dataset(std::string_view name) const {
  const std::string n(name);
  if (n.empty() || h5::object_kind(impl_->file.get(), n, impl_->where()) != h5::ObjectKind::dataset)
    return std::nullopt;
  return impl_->info_of(n);
}

std::optional<AttrValue> ResultsReader::dataset_attribute(std::string_view dataset,
                                                          std::string_view name) const {
  h5::Handle ds = impl_->open_dataset(dataset);
  return h5::read_attribute(ds.get(), name, impl_->where(dataset));
}

std::vector<double> ResultsReader::read_doubles(std::string_view name) const {
  return impl_->read_all<double>(name, H5T_NATIVE_DOUBLE, false);
}

std::vector<std::int64_t> ResultsReader::read_ints(std::string_view name) const {
  return impl_->read_all<std::int64_t>(name, H5T_NATIVE_INT64, true);
}

std::int64_t ResultsReader::completed_steps() const {
  std::int64_t fewest = -1;
  for (const DatasetInfo& d : datasets()) {
    const bool growing =
        d.name.rfind("steps/", 0) == 0 || d.name.rfind("ranks/", 0) == 0 || d.name.rfind("comm/", 0) == 0;
    if (!growing || d.shape.empty()) continue;
    fewest = fewest < 0 ? d.shape[0] : std::min(fewest, d.shape[0]);
  }
  return std::max<std::int64_t>(fewest, 0);
}

}  // namespace hzp::harness
