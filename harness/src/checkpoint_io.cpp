// A scheduler's state to and from a checkpoint file (checkpoint_io.hpp): StateArchive over CheckpointWriter and
// CheckpointReader (each rank packs or unpacks only its runs), the scalars beside the arrays, and a resume's checks.
#include "hzp/harness/checkpoint_io.hpp"

#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "h5_handle.hpp"
#include "hzp/core/error.hpp"
#include "hzp/schedulers/state_archive.hpp"

namespace hzp::harness {
namespace {

using schedulers::StateArchive;

std::vector<FlatRun> flat(std::span<const StateArchive::Run> runs) {
  std::vector<FlatRun> out;
  out.reserve(runs.size());
  for (const StateArchive::Run& r : runs) out.push_back({r.global, r.count});
  return out;
}

std::size_t packed_count(std::span<const StateArchive::Run> runs) {
  std::size_t n = 0;
  for (const StateArchive::Run& r : runs) n += static_cast<std::size_t>(r.count);
  return n;
}

// The runs' elements between a scheduler's buffer (`base`, at their local offsets) and the packed order the file's
// reader and writer take (back to back): packed from base when saving, unpacked into it when loading.
void copy_runs(std::span<const StateArchive::Run> runs, std::size_t es, void* base, std::byte* packed, bool to_packed) {
  for (const StateArchive::Run& r : runs) {
    std::byte* local = static_cast<std::byte*>(base) + r.local * static_cast<std::int64_t>(es);
    const std::size_t bytes = static_cast<std::size_t>(r.count) * es;
    if (to_packed) std::memcpy(packed, local, bytes);
    else std::memcpy(local, packed, bytes);
    packed += bytes;
  }
}

// Lists of doubles as text attributes: C99 hexadecimal floats ("%a") read back by strtod bit for bit.
std::string encode_numbers(const std::vector<double>& v) {
  std::string s;
  char buf[40];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, "%a", x);
    if (!s.empty()) s += ' ';
    s += buf;
  }
  return s;
}

std::vector<double> decode_numbers(const std::string& text, const std::string& where) {
  std::vector<double> v;
  const char* p = text.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    const double x = std::strtod(p, &end);
    if (end == p) HZP_THROW(DataError, where, " is not a list of numbers: '", text.substr(0, 60), "'");
    v.push_back(x);
    p = end;
    while (*p == ' ') ++p;
  }
  return v;
}

class SaveArchive final : public StateArchive {
 public:
  SaveArchive(CheckpointWriter& w, std::int64_t next) : w_(w), next_(next) {}
  bool loading() const override { return false; }
  std::int64_t next_step() const override { return next_; }
  void array(std::string_view component, DType dtype, std::span<const Run> runs, void* base) override {
    const std::size_t es = dtype_size(dtype);
    std::vector<std::byte> packed(packed_count(runs) * es);
    copy_runs(runs, es, base, packed.data(), true);
    const std::vector<FlatRun> f = flat(runs);
    w_.write(component, dtype, f, packed.data());
  }
  void numbers(std::string_view name, std::vector<double>& values) override {
    w_.attribute(name, encode_numbers(values));
  }

 private:
  CheckpointWriter& w_;
  std::int64_t next_;
};

class LoadArchive final : public StateArchive {
 public:
  LoadArchive(CheckpointReader& r, std::int64_t next) : r_(r), next_(next) {}
  bool loading() const override { return true; }
  std::int64_t next_step() const override { return next_; }
  void array(std::string_view component, DType dtype, std::span<const Run> runs, void* base) override {
    const std::size_t es = dtype_size(dtype);
    std::vector<std::byte> packed(packed_count(runs) * es);
    const std::vector<FlatRun> f = flat(runs);
    r_.read(component, dtype, f, packed.data());
    copy_runs(runs, es, base, packed.data(), false);
  }
  void numbers(std::string_view name, std::vector<double>& values) override {
    values.clear();
    if (!r_.has_attribute(name)) return;
    const AttrValue v = r_.attribute(name);
    const std::string where = "attribute '" + std::string(name) + "' of checkpoint '" + r_.path().string() + "'";
    if (!std::holds_alternative<std::string>(v)) HZP_THROW(DataError, where, " is not a text attribute");
    values = decode_numbers(std::get<std::string>(v), where);
  }

 private:
  CheckpointReader& r_;
  std::int64_t next_;
};

std::int64_t int_attr(const CheckpointReader& r, std::string_view name) {
  const AttrValue v = r.attribute(name);
  if (!std::holds_alternative<std::int64_t>(v))
    HZP_THROW(DataError, "attribute '", name, "' of checkpoint '", r.path().string(), "' is not an integer");
  return std::get<std::int64_t>(v);
}

std::string string_attr(const CheckpointReader& r, std::string_view name) {
  const AttrValue v = r.attribute(name);
  if (!std::holds_alternative<std::string>(v))
    HZP_THROW(DataError, "attribute '", name, "' of checkpoint '", r.path().string(), "' is not text");
  return std::get<std::string>(v);
}

}  // namespace

std::vector<CheckpointTensor> checkpoint_tensor_table(const workloads::ParamLayout& layout) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const workloads::ParamTensor& t : layout.unit(u).tensors) {
      const Shape& s = t.full_shape();
      shapes.push_back({t.name, std::vector<std::int64_t>(s.dims.begin(), s.dims.begin() + s.ndim)});
    }
  return flat_tensor_table(shapes);
}

void write_checkpoint(MPI_Comm comm, const std::filesystem::path& path, schedulers::Scheduler& scheduler,
                      const workloads::ParamLayout& layout, const std::string& model, const CheckpointMeta& meta) {
  CheckpointWriter w(comm, path, checkpoint_tensor_table(layout), model);
  SaveArchive archive(w, meta.step + 1);
  scheduler.checkpoint(archive);
  w.attribute("step", meta.step);
  w.attribute("seed", meta.seed);
  w.attribute("precision", meta.precision);
  w.attribute("scheduler", meta.scheduler);
  w.attribute("world_size", meta.world_size);
  w.attribute("train.global_batch", meta.global_batch);
  w.attribute("results_file", meta.results_file);
  w.commit();
}

ResumeSource::ResumeSource(MPI_Comm comm, const std::filesystem::path& path, const workloads::ParamLayout& layout,
                           const std::string& model, const std::string& precision)
    : path_(path) {
  reader_ = std::make_unique<CheckpointReader>(comm, path, checkpoint_tensor_table(layout), model);
  const CheckpointReader& r = *reader_;
  meta_.step = int_attr(r, "step");
  meta_.seed = int_attr(r, "seed");
  meta_.precision = string_attr(r, "precision");
  meta_.scheduler = string_attr(r, "scheduler");
  meta_.world_size = int_attr(r, "world_size");
  meta_.global_batch = int_attr(r, "train.global_batch");
  meta_.results_file = string_attr(r, "results_file");
  if (meta_.precision != precision)
    HZP_THROW(ConfigError, "--resume '", path.string(), "': the checkpoint was written with train.precision = ",
              meta_.precision, " but this run has train.precision = ", precision, ". Fix: --set train.precision=",
              meta_.precision, " (a checkpoint continues in the precision it was trained in)");
}

void ResumeSource::restore(schedulers::Scheduler& scheduler) {
  // The results thread may be writing the results file meanwhile (h5_handle.hpp, calls_mutex).
  const std::lock_guard<std::timed_mutex> lock(h5::calls_mutex());
  {
    LoadArchive archive(*reader_, meta_.step + 1);
    scheduler.checkpoint(archive);
  }
  reader_.reset();
}

std::filesystem::path checkpoint_path_for(const std::filesystem::path& dir, const std::filesystem::path& results,
                                          std::int64_t step) {
  return dir / (results.stem().string() + ".step" + std::to_string(step + 1) + ".ckpt.h5");
}

}  // namespace hzp::harness
