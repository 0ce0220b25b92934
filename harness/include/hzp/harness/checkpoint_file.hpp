// One training checkpoint as one HDF5 file, written and read collectively through MPI-IO (docs/checkpoints.md):
// per state component (param, master, m, v, ...) one 1-D array over the model's tensors in their flat, unpadded
// order, each rank writing and reading only the runs of it that it holds, so a checkpoint written by one
// scheduler and world size loads into any other (resharding is a different choice of runs). The tensor table
// (names, global shapes, offsets) and the model's description are stored with it and checked on load.
//
// Durability: a checkpoint is written under a temporary name beside its final path and renamed only after every
// rank's writes are in and the file is closed, so a run killed mid-write leaves the previous checkpoint (or
// none) under the final name, never a partial one. Each array carries an order-free checksum of its elements
// (a sum over the elements of a hash of index and bits, so ranks add their runs' shares); the reader recomputes
// it over the whole array, spread over its ranks, and refuses a file whose bytes changed, with one message
// naming the file and what is wrong.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/dtype.hpp"
#include "hzp/harness/results_file.hpp"

namespace hzp::harness {

/// A tensor as a checkpoint names it: its global shape and where it starts in the flat order.
struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;
  std::int64_t numel() const noexcept;
  bool operator==(const CheckpointTensor&) const = default;
};

/// The tensors of `shapes` (name, global shape) laid end to end in the given order.
std::vector<CheckpointTensor> flat_tensor_table(const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& shapes);

/// Elements [offset, offset + count) of the flat order.
struct FlatRun {
  std::int64_t offset = 0, count = 0;
};

/// The order-free checksum of elements: the wrapping sum over them of a 64-bit mix of (flat index, raw bits).
/// `packed` holds the runs' elements back to back, each of `bytes_per_element` (1, 2, 4 or 8).
std::uint64_t flat_checksum(std::span<const FlatRun> runs, const void* packed, std::size_t bytes_per_element);

inline constexpr std::int64_t kCheckpointFormat = 1;

class CheckpointWriter {
 public:
  /// Collective over `comm`: creates the temporary file beside `path` (path + ".partial"), replacing a stale
  /// one, and stores the tensor table and `model` (ModelSpec::describe()). IoError naming the path when the
  /// folder is missing or unwritable.
  CheckpointWriter(MPI_Comm comm, std::filesystem::path path, std::vector<CheckpointTensor> tensors,
                   std::string model);
  /// Not committed: closes and removes the temporary file; the final path is left as it was.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Collective: array `component` of the flat order's length in `dtype` (f32, f64, i64 or bf16), this rank's
  /// `runs` filled from `packed` (their elements back to back). Ranks that hold nothing new (replicas) pass no
  /// runs. The runs of all ranks must cover every element exactly once: a gap or an overlap is refused
  /// (PreconditionError naming the component and the counts) before anything is committed.
  void write(std::string_view component, DType dtype, std::span<const FlatRun> runs, const void* packed);
  /// Collective, every rank with the same value: a scalar of the training state (the step, the data position,
  /// deterministic mode's scale, ...), or provenance (the scheduler, the world size).
  void attribute(std::string_view name, const AttrValue& value);
  /// Collective: closes the file and moves it to its final path (replacing an older checkpoint there).
  void commit();

  const std::filesystem::path& path() const noexcept { return path_; }
  std::int64_t total_numel() const noexcept { return total_; }

 private:
  struct File;
  MPI_Comm comm_;
  int rank_ = 0;
  std::filesystem::path path_, partial_;
  std::int64_t total_ = 0;
  std::unique_ptr<File> file_;
  bool committed_ = false;
};

class CheckpointReader {
 public:
  /// Collective over `comm`: opens `path`, checks its format, its tensor table against `tensors` and its model
  /// against `model` (when not empty), and every array's checksum (each rank reading a share of each). DataError
  /// naming the file and the problem: not a checkpoint, truncated, another model or tensor table, changed bytes.
  CheckpointReader(MPI_Comm comm, std::filesystem::path path, const std::vector<CheckpointTensor>& tensors,
                   std::string_view model);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  /// The arrays the file holds, and their dtype.
  const std::map<std::string, DType>& components() const noexcept { return components_; }
  /// Collective: this rank's `runs` of array `component` into `packed` (back to back), converting nothing: the
  /// caller asks for the dtype it was written in (PreconditionError otherwise, or DataError when absent).
  void read(std::string_view component, DType dtype, std::span<const FlatRun> runs, void* packed);
  /// A stored scalar; DataError naming the file when absent.
  AttrValue attribute(std::string_view name) const;
  bool has_attribute(std::string_view name) const;

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  struct File;
  MPI_Comm comm_;
  std::filesystem::path path_;
  std::int64_t total_ = 0;
  std::unique_ptr<File> file_;
  std::map<std::string, DType> components_;
  std::map<std::string, AttrValue> attributes_;
};

}  // namespace hzp::harness
