// What keeps a results file from being lost while it is written (docs/results-schema.md, "Durability"):
//   - the writer's own lock on the file: an open-file-description lock that a second hzpbench sees before
//     it touches the path, whether or not HDF5's file locking is on (HDF5_USE_FILE_LOCKING=FALSE is common
//     on parallel file systems) and before any truncation;
//   - the check that the path still names the file being written (a file moved or replaced under a live
//     run would otherwise take every later row into a file nobody can reach);
//   - a reserve of disk blocks past the file's end, so that when the disk fills, the failed status and the
//     last flush still fit and the file opens with every step that was flushed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace hzp::harness {

/// Who writes `path` now, if anyone: "an hzpbench run (its lock)" or "an HDF5 writer (its file lock)".
/// Reads locks only; never changes the file. nullopt when nobody writes it (or it does not exist).
std::optional<std::string> live_writer_of(const std::filesystem::path& path);

/// One results file's guard, owned by its writer. Holds its own descriptor of the file for the writer's
/// lifetime (the lock and the reserve belong to it) and releases both in release(), after HDF5 closed
/// the file.
class FileGuard {
 public:
  /// Opens `path` (just created by this process) and takes the writer's lock. Throws IoError when another
  /// process holds it. Where the file system has no such locks (ENOLCK, EINVAL), the run goes on unlocked
  /// and locked() says so.
  explicit FileGuard(const std::filesystem::path& path);
  ~FileGuard();
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;

  bool locked() const noexcept { return locked_; }

  /// Whether `path` still names this file (same device and inode).
  bool still_at(const std::filesystem::path& path) const;

  /// Keeps at least `bytes` of disk allocated past the file's current end (fallocate, size unchanged).
  /// Returns false when the file system has no room for them (ENOSPC/EDQUOT); true when they are reserved,
  /// or when this file system cannot reserve at all (then reserving() turns false and later calls do
  /// nothing).
  bool reserve(std::int64_t bytes);
  bool reserving() const noexcept { return reserving_; }

  /// The file's size now (bytes).
  std::int64_t size() const;
  /// Bytes free to this process on the file's file system.
  std::int64_t free_bytes() const;

  /// Copies the file's current bytes (read through this descriptor, so also after the path was replaced)
  /// to `dest`, which must not exist. Throws IoError.
  void copy_to(const std::filesystem::path& dest) const;

  /// Gives the reserve back (blocks past the end are freed) and drops the lock. Idempotent, never throws.
  void release() noexcept;

 private:
  int fd_ = -1;
  bool locked_ = false;
  bool reserving_ = true;
  std::int64_t reserved_end_ = 0;  // the file offset up to which blocks are allocated
};

}  // namespace hzp::harness
