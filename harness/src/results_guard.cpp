// The results file's guard (results_guard.hpp): an OFD write lock, an inode check, and a fallocate reserve.
// Linux calls throughout: the project runs on Linux clusters, and each call degrades to "not protected"
// (never to an error) where a file system lacks it.
#include "results_guard.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

// The whole file, from offset 0 to any length: a lock that also covers bytes written later.
struct flock whole_file(short type) {
  struct flock fl{};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  return fl;
}

}  // namespace

std::optional<std::string> live_writer_of(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> who;
  // An hzpbench writer's lock; F_OFD_GETLK also reports a classic POSIX lock of another process.
  struct flock fl = whole_file(F_WRLCK);
  if (::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) who = "an hzpbench run (it holds the file's lock)";
  // An HDF5 writer with file locking on holds an exclusive flock for as long as the file is open; a
  // shared one is granted beside readers, so only a writer makes this fail.
  if (!who) {
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) who = "an HDF5 writer (it holds HDF5's file lock)";
    } else {
      ::flock(fd, LOCK_UN);
    }
  }
  ::close(fd);
  return who;
}

FileGuard::FileGuard(const std::filesystem::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    HZP_THROW(IoError, "cannot open results file '", path.string(), "' to lock it: ", std::strerror(err));
  }
  struct flock fl = whole_file(F_WRLCK);
  if (::fcntl(fd_, F_OFD_SETLK, &fl) == 0) {
    locked_ = true;
    return;
  }
  const int err = errno;
  if (err == EAGAIN || err == EACCES) {
    ::close(fd_);
    fd_ = -1;
    HZP_THROW(IoError, "results file '", path.string(),
              "' is locked by another process (a run still writing it?); choose another --out");
  }
  // ENOLCK / EINVAL: a file system without such locks. The run is still written, without the lock.
  locked_ = false;
}

FileGuard::~FileGuard() { release(); }

bool FileGuard::still_at(const std::filesystem::path& path) const {
  struct stat mine{}, named{};
  if (fd_ < 0 || ::fstat(fd_, &mine) != 0) return true;  // nothing to compare with: do not cry wolf
  if (::stat(path.c_str(), &named) != 0) return false;    // removed
  return mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

bool FileGuard::reserve(std::int64_t bytes) {
  if (fd_ < 0 || !reserving_ || bytes <= 0) return true;
  const std::int64_t end = size();
  // Blocks already allocated are not allocated again, so topping the reserve up each flush costs one call.
  if (::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(end), static_cast<off_t>(bytes)) == 0) {
    reserved_end_ = std::max(reserved_end_, end + bytes);
    return true;
  }
  const int err = errno;
  if (err == ENOSPC || err == EDQUOT) return false;
  reserving_ = false;  // EOPNOTSUPP, ENOSYS, EINVAL...: this file system cannot reserve; say so once, elsewhere
  return true;
}

std::int64_t FileGuard::size() const {
  struct stat st{};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_size);
}

std::int64_t FileGuard::free_bytes() const {
  struct statvfs vs{};
  if (fd_ < 0 || ::fstatvfs(fd_, &vs) != 0) return -1;
  return static_cast<std::int64_t>(vs.f_bavail) * static_cast<std::int64_t>(vs.f_frsize);
}

void FileGuard::copy_to(const std::filesystem::path& dest) const {
  const int out = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    const int err = errno;
    HZP_THROW(IoError, "cannot create '", dest.string(), "': ", std::strerror(err));
  }
  std::vector<char> buf(1 << 20);
  off_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd_, buf.data(), buf.size(), off);
    if (n == 0) break;
    if (n < 0 || ::write(out, buf.data(), static_cast<std::size_t>(n)) != n) {
      const int err = errno;
      ::close(out);
      HZP_THROW(IoError, "copying the results to '", dest.string(), "' failed: ", std::strerror(err));
    }
    off += n;
  }
  ::close(out);
}

void FileGuard::release() noexcept {
  if (fd_ < 0) return;
  const std::int64_t end = size();
  // Blocks reserved past the end stay allocated (and counted by du) after close unless punched out.
  if (reserved_end_ > end)
    (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(end),
                      static_cast<off_t>(reserved_end_ - end));
  ::close(fd_);  // drops the OFD lock
  fd_ = -1;
}

}  // namespace hzp::harness
