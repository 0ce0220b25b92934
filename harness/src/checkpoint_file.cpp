// CheckpointWriter and CheckpointReader (checkpoint_file.hpp) over parallel HDF5: one file opened by every rank
// with the MPI-IO driver; arrays created collectively and written or read with collective transfers through
// hyperslab unions of each rank's runs; scalars as attributes of the root (every rank passes the same value, as
// parallel HDF5 requires for metadata). Every step that can fail on one rank only (the folder, the rename) is
// decided on rank 0 and broadcast, so all ranks throw together instead of leaving the others in a collective.
#include "hzp/harness/checkpoint_file.hpp"

#include <hdf5.h>

#include <cstring>
#include <numeric>
#include <sstream>
#include <system_error>

#include "h5_attributes.hpp"
#include "h5_handle.hpp"
#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

constexpr const char* kStateGroup = "state";

std::uint64_t mix64(std::uint64_t x) noexcept {  // splitmix64's finaliser: every input bit reaches every output bit
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

hid_t memory_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::i64: return H5T_NATIVE_INT64;
    case DType::bf16: return H5T_NATIVE_UINT16;  // the bits as stored in memory; the dataset says "bf16"
    default: break;
  }
  HZP_THROW(PreconditionError, "checkpoint arrays are f32, f64, i64 or bf16, not ", dtype_name(t));
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream o;
  for (std::size_t i = 0; i < shape.size(); ++i) o << (i ? "x" : "") << shape[i];
  return o.str();
}

std::vector<std::int64_t> parse_shape(const std::string& s) {
  std::vector<std::int64_t> out;
  std::size_t pos = 0;
  while (pos <= s.size() && !s.empty()) {
    const std::size_t x = s.find('x', pos);
    out.push_back(std::stoll(s.substr(pos, x == std::string::npos ? std::string::npos : x - pos)));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return out;
}

int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int comm_size(MPI_Comm c) {
  int n = 1;
  MPI_Comm_size(c, &n);
  return n;
}

// Rank 0's verdict (empty = fine) on every rank.
std::string broadcast_text(MPI_Comm comm, std::string text) {
  std::int64_t n = static_cast<std::int64_t>(text.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  return text;
}

h5::Handle mpio_access(MPI_Comm comm) {
  h5::Handle fapl = HZP_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), "making a file access property list");
  HZP_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "selecting the MPI-IO driver");
  // The 1.8 format stores large attribute lists (a 36B model's tensor table) densely instead of refusing them.
  HZP_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), "choosing the file format");
  return fapl;
}

h5::Handle collective_transfer() {
  h5::Handle dxpl = HZP_H5_OWN(H5Pcreate(H5P_DATASET_XFER), "making a transfer property list");
  HZP_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "asking for collective transfers");
  return dxpl;
}

// The file selection of `runs` in a 1-D space, and a memory space of their elements back to back (one element
// with nothing selected when the rank has none: HDF5 refuses empty spaces in a transfer).
struct Selection {
  h5::Handle file, memory;
};
Selection select_runs(hid_t dataset, std::span<const FlatRun> runs, std::int64_t total, const std::string& where) {
  Selection s;
  s.file = HZP_H5_OWN(H5Dget_space(dataset), "reading the shape of ", where);
  HZP_H5_CHECK(H5Sselect_none(s.file.get()), "clearing a selection of ", where);
  hsize_t local = 0;
  for (const FlatRun& r : runs) {
    HZP_CHECK(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= total, "checkpoint: run [", r.offset, ", ",
              r.offset + r.count, ") outside the ", total, " elements of ", where);
    if (r.count == 0) continue;
    const hsize_t start = static_cast<hsize_t>(r.offset), count = static_cast<hsize_t>(r.count);
    HZP_H5_CHECK(H5Sselect_hyperslab(s.file.get(), H5S_SELECT_OR, &start, nullptr, &count, nullptr),
                 "selecting elements of ", where);
    local += count;
  }
  const hsize_t dims = local > 0 ? local : 1;
  s.memory = HZP_H5_OWN(H5Screate_simple(1, &dims, nullptr), "making a memory space for ", where);
  if (local == 0) HZP_H5_CHECK(H5Sselect_none(s.memory.get()), "clearing a memory selection for ", where);
  return s;
}

// Σ i and Σ i² over [0, n), wrapped to 64 bits: each product's factors divided first (one of n − 1, n is even; one
// of n − 1, n, 2n − 1 is a multiple of 3), so the wrapping multiplications give the exact sums modulo 2⁶⁴.
std::uint64_t index_sum(std::int64_t n) {
  if (n <= 0) return 0;
  std::uint64_t a = static_cast<std::uint64_t>(n) - 1, b = static_cast<std::uint64_t>(n);
  (a % 2 == 0 ? a : b) /= 2;
  return a * b;
}
std::uint64_t index_square_sum(std::int64_t n) {
  if (n <= 0) return 0;
  std::uint64_t a = static_cast<std::uint64_t>(n) - 1, b = static_cast<std::uint64_t>(n), c = 2 * b - 1;
  (a % 2 == 0 ? a : b) /= 2;
  (a % 3 == 0 ? a : b % 3 == 0 ? b : c) /= 3;
  return a * b * c;
}

std::int64_t count_of(std::span<const FlatRun> runs) {
  std::int64_t n = 0;
  for (const FlatRun& r : runs) n += r.count;
  return n;
}

}  // namespace

std::int64_t CheckpointTensor::numel() const noexcept {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

std::vector<CheckpointTensor> flat_tensor_table(
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& shapes) {
  std::vector<CheckpointTensor> out;
  std::int64_t offset = 0;
  for (const auto& [name, shape] : shapes) {
    out.push_back({name, shape, offset});
    offset += out.back().numel();
  }
  return out;
}

std::uint64_t flat_checksum(std::span<const FlatRun> runs, const void* packed, std::size_t bytes_per_element) {
  HZP_CHECK(bytes_per_element == 1 || bytes_per_element == 2 || bytes_per_element == 4 || bytes_per_element == 8,
            "flat_checksum: ", bytes_per_element, " bytes per element");
  const auto* p = static_cast<const unsigned char*>(packed);
  std::uint64_t sum = 0;
  for (const FlatRun& r : runs)
    for (std::int64_t i = 0; i < r.count; ++i, p += bytes_per_element) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, p, bytes_per_element);
      sum += mix64(static_cast<std::uint64_t>(r.offset + i) * 0x100000001b3ULL ^ mix64(bits));
    }
  return sum;
}

// ---------------------------------------------------------------------------------------------------------------

struct CheckpointWriter::File {
  h5::Handle file, state;
};

CheckpointWriter::CheckpointWriter(MPI_Comm comm, std::filesystem::path path, std::vector<CheckpointTensor> tensors,
                                   std::string model)
    : comm_(comm), rank_(comm_rank(comm)), path_(std::move(path)) {
  partial_ = path_;
  partial_ += ".partial";
  for (const CheckpointTensor& t : tensors) total_ = std::max(total_, t.offset + t.numel());
  std::string problem;
  if (rank_ == 0) {
    const std::filesystem::path dir = path_.has_parent_path() ? path_.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      problem = "the folder '" + dir.string() + "' does not exist; fix: create it, or give output.checkpoint_dir "
                "an existing folder";
    else
      std::filesystem::remove(partial_, ec);  // a stale partial file of a killed run
  }
  problem = broadcast_text(comm_, problem);
  if (!problem.empty()) HZP_THROW(IoError, "checkpoint '", path_.string(), "': ", problem);

  h5::quiet_errors();
  file_ = std::make_unique<File>();
  const h5::Handle fapl = mpio_access(comm_);
  file_->file = HZP_H5_OWN(H5Fcreate(partial_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                           "creating checkpoint '", partial_.string(), "'");
  file_->state = HZP_H5_OWN(H5Gcreate2(file_->file.get(), kStateGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                            "creating group 'state' in checkpoint '", partial_.string(), "'");
  std::vector<std::string> names, shapes;
  for (const CheckpointTensor& t : tensors) {
    names.push_back(t.name);
    shapes.push_back(shape_text(t.shape));
  }
  const std::string where = "checkpoint '" + partial_.string() + "'";
  h5::write_attribute(file_->file.get(), "format", std::int64_t{kCheckpointFormat}, where);
  h5::write_attribute(file_->file.get(), "model", model, where);
  h5::write_attribute(file_->file.get(), "total_numel", total_, where);
  h5::write_attribute(file_->file.get(), "tensor_names", names, where);
  h5::write_attribute(file_->file.get(), "tensor_shapes", shapes, where);
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  file_.reset();
  if (rank_ == 0) {
    std::error_code ec;
    std::filesystem::remove(partial_, ec);
  }
}

void CheckpointWriter::write(std::string_view component, DType dtype, std::span<const FlatRun> runs,
                             const void* packed) {
  HZP_CHECK(!committed_, "checkpoint '", path_.string(), "': write after commit");
  const std::string where = "array '" + std::string(component) + "' of checkpoint '" + partial_.string() + "'";
  const hid_t mtype = memory_type(dtype);
  // The ranks' runs must cover the flat order exactly once: their element counts and the sums of their indexes
  // and squared indexes (wrapping) must be those of [0, total).
  std::uint64_t mine[4] = {static_cast<std::uint64_t>(count_of(runs)), 0, 0,
                           flat_checksum(runs, packed, dtype_size(dtype))};
  for (const FlatRun& r : runs) {
    mine[1] += index_sum(r.offset + r.count) - index_sum(r.offset);
    mine[2] += index_square_sum(r.offset + r.count) - index_square_sum(r.offset);
  }
  std::uint64_t all[4] = {};
  MPI_Allreduce(mine, all, 4, MPI_UINT64_T, MPI_SUM, comm_);
  const std::uint64_t want[3] = {static_cast<std::uint64_t>(total_), index_sum(total_), index_square_sum(total_)};
  if (all[0] != want[0] || all[1] != want[1] || all[2] != want[2])
    HZP_THROW(PreconditionError, where, ": the ranks' runs hold ", all[0], " elements of ", total_,
              all[0] == want[0] ? " but not each exactly once" : "",
              "; every element must be written by exactly one rank (replicas pass no runs)");

  const hsize_t dims = static_cast<hsize_t>(total_);
  const h5::Handle space = HZP_H5_OWN(H5Screate_simple(1, &dims, nullptr), "making the shape of ", where);
  const h5::Handle dcpl = HZP_H5_OWN(H5Pcreate(H5P_DATASET_CREATE), "making a dataset property list");
  HZP_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "leaving ", where, " unfilled");
  const std::string name(component);
  const h5::Handle dset = HZP_H5_OWN(
      H5Dcreate2(file_->state.get(), name.c_str(), mtype, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
      "creating ", where);
  const Selection sel = select_runs(dset.get(), runs, total_, where);
  const h5::Handle dxpl = collective_transfer();
  static const std::uint64_t dummy = 0;
  HZP_H5_CHECK(H5Dwrite(dset.get(), mtype, sel.memory.get(), sel.file.get(), dxpl.get(),
                        count_of(runs) > 0 ? packed : &dummy),
               "writing ", where);
  h5::write_attribute(dset.get(), "dtype", std::string(dtype_name(dtype)), where);
  h5::write_attribute(dset.get(), "checksum", static_cast<std::int64_t>(all[3]), where);
}

void CheckpointWriter::attribute(std::string_view name, const AttrValue& value) {
  HZP_CHECK(!committed_, "checkpoint '", path_.string(), "': attribute after commit");
  h5::write_attribute(file_->file.get(), name, value, "checkpoint '" + partial_.string() + "'");
}

void CheckpointWriter::commit() {
  HZP_CHECK(!committed_, "checkpoint '", path_.string(), "': committed twice");
  file_->state.reset();
  HZP_H5_CHECK(file_->file.close_checked(), "closing checkpoint '", partial_.string(), "'");
  file_.reset();
  MPI_Barrier(comm_);  // every rank's part is in the closed file before it takes the final name
  std::string problem;
  if (rank_ == 0) {
    std::error_code ec;
    std::filesystem::rename(partial_, path_, ec);
    if (ec) problem = "moving '" + partial_.string() + "' to its final name failed: " + ec.message();
  }
  problem = broadcast_text(comm_, problem);
  if (!problem.empty()) HZP_THROW(IoError, "checkpoint '", path_.string(), "': ", problem);
  committed_ = true;
}

// ---------------------------------------------------------------------------------------------------------------

struct CheckpointReader::File {
  h5::Handle file, state;
};

CheckpointReader::CheckpointReader(MPI_Comm comm, std::filesystem::path path,
                                   const std::vector<CheckpointTensor>& tensors, std::string_view model)
    : comm_(comm), path_(std::move(path)) {
  const std::string where = "checkpoint '" + path_.string() + "'";
  std::string problem;
  if (comm_rank(comm_) == 0) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path_, ec))
      problem = "no such file; fix: give a checkpoint written by hzpbench run (output.checkpoint_dir)";
  }
  problem = broadcast_text(comm_, problem);
  if (!problem.empty()) HZP_THROW(IoError, where, ": ", problem);

  h5::quiet_errors();
  file_ = std::make_unique<File>();
  const h5::Handle fapl = mpio_access(comm_);
  const hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (f < 0)
    HZP_THROW(DataError, where, " does not open as an HDF5 file (",
              h5::summarize_error_stack(h5::take_error_stack()), "): truncated or not a checkpoint");
  file_->file = h5::Handle(f);
  auto attr = [&](const char* name) {
    std::optional<AttrValue> v = h5::read_attribute(file_->file.get(), name, where);
    if (!v) HZP_THROW(DataError, where, " has no '", name, "' attribute: not a checkpoint hzpbench wrote");
    return *v;
  };
  const AttrValue format = attr("format");
  if (!std::holds_alternative<std::int64_t>(format) || std::get<std::int64_t>(format) != kCheckpointFormat)
    HZP_THROW(DataError, where, " is in another checkpoint format than this hzpbench's (", kCheckpointFormat, ")");
  const AttrValue stored_model = attr("model");
  if (!model.empty() && std::get<std::string>(stored_model) != model)
    HZP_THROW(DataError, where, " is of another model: it holds '", std::get<std::string>(stored_model),
              "', this run is '", model, "'; fix: the same model.* settings as the run that wrote it");
  const auto names = std::get<std::vector<std::string>>(attr("tensor_names"));
  const auto shapes = std::get<std::vector<std::string>>(attr("tensor_shapes"));
  if (names.size() != shapes.size())
    HZP_THROW(DataError, where, ": its tensor table is damaged (", names.size(), " names, ", shapes.size(), " shapes)");
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> table;
  for (std::size_t i = 0; i < names.size(); ++i) table.emplace_back(names[i], parse_shape(shapes[i]));
  const std::vector<CheckpointTensor> stored = flat_tensor_table(table);
  for (std::size_t i = 0; i < std::max(stored.size(), tensors.size()); ++i)
    if (i >= stored.size() || i >= tensors.size() || !(stored[i] == tensors[i]))
      HZP_THROW(DataError, where, " has another tensor table: tensor ", i, " is ",
                i < stored.size() ? stored[i].name + " [" + shape_text(stored[i].shape) + "]" : "missing",
                " there and ", i < tensors.size() ? tensors[i].name + " [" + shape_text(tensors[i].shape) + "]" : "missing",
                " in this run's model");
  total_ = std::get<std::int64_t>(attr("total_numel"));
  for (const std::string& n : h5::attribute_names(file_->file.get(), where))
    attributes_[n] = *h5::read_attribute(file_->file.get(), n, where);

  if (h5::object_kind(file_->file.get(), kStateGroup, where) != h5::ObjectKind::group)
    HZP_THROW(DataError, where, " has no 'state' group: not a checkpoint hzpbench wrote");
  file_->state = HZP_H5_OWN(H5Gopen2(file_->file.get(), kStateGroup, H5P_DEFAULT), "opening 'state' in ", where);
  H5G_info_t info;
  HZP_H5_CHECK(H5Gget_info(file_->state.get(), &info), "listing the arrays of ", where);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256] = {};
    if (H5Lget_name_by_idx(file_->state.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0)
      HZP_THROW(DataError, where, ": array ", i, " has no readable name");
    const h5::Handle d = HZP_H5_OWN(H5Dopen2(file_->state.get(), name, H5P_DEFAULT), "opening array '", name, "' of ", where);
    const std::optional<AttrValue> dt = h5::read_attribute(d.get(), "dtype", where);
    const std::optional<DType> t = dt && std::holds_alternative<std::string>(*dt)
                                       ? parse_dtype(std::get<std::string>(*dt)) : std::nullopt;
    if (!t) HZP_THROW(DataError, where, ": array '", name, "' has no dtype attribute");
    components_[name] = *t;
  }
  // Every array's checksum over all of it, each rank reading an equal share.
  const int r = comm_rank(comm_), w = comm_size(comm_);
  const FlatRun share{total_ * r / w, total_ * (r + 1) / w - total_ * r / w};
  for (const auto& [name, t] : components_) {
    std::vector<unsigned char> buf(static_cast<std::size_t>(share.count) * dtype_size(t));
    read(name, t, std::span<const FlatRun>(&share, 1), buf.data());
    std::uint64_t mine = flat_checksum(std::span<const FlatRun>(&share, 1), buf.data(), dtype_size(t)), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, comm_);
    const h5::Handle d = HZP_H5_OWN(H5Dopen2(file_->state.get(), name.c_str(), H5P_DEFAULT), "opening array '", name,
                                    "' of ", where);
    const std::optional<AttrValue> sum = h5::read_attribute(d.get(), "checksum", where);
    if (!sum || !std::holds_alternative<std::int64_t>(*sum) ||
        static_cast<std::uint64_t>(std::get<std::int64_t>(*sum)) != all)
      HZP_THROW(DataError, where, ": array '", name, "' does not match its checksum (its bytes changed after it was "
                "written); fix: resume from an older checkpoint");
  }
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::read(std::string_view component, DType dtype, std::span<const FlatRun> runs, void* packed) {
  const std::string name(component);
  const std::string where = "array '" + name + "' of checkpoint '" + path_.string() + "'";
  const auto it = components_.find(name);
  if (it == components_.end()) HZP_THROW(DataError, "checkpoint '", path_.string(), "' has no array '", name, "'");
  HZP_CHECK(it->second == dtype, where, " is ", dtype_name(it->second), ", asked for as ", dtype_name(dtype));
  const h5::Handle dset = HZP_H5_OWN(H5Dopen2(file_->state.get(), name.c_str(), H5P_DEFAULT), "opening ", where);
  const Selection sel = select_runs(dset.get(), runs, total_, where);
  const h5::Handle dxpl = collective_transfer();
  std::uint64_t dummy = 0;
  if (H5Dread(dset.get(), memory_type(dtype), sel.memory.get(), sel.file.get(), dxpl.get(),
              count_of(runs) > 0 ? packed : &dummy) < 0)
    HZP_THROW(DataError, "reading ", where, " failed (", h5::summarize_error_stack(h5::take_error_stack()),
              "): truncated or damaged");
}

AttrValue CheckpointReader::attribute(std::string_view name) const {
  const auto it = attributes_.find(std::string(name));
  if (it == attributes_.end())
    HZP_THROW(DataError, "checkpoint '", path_.string(), "' has no attribute '", name, "'");
  return it->second;
}

bool CheckpointReader::has_attribute(std::string_view name) const {
  return attributes_.count(std::string(name)) > 0;
}

}  // namespace hzp::harness
