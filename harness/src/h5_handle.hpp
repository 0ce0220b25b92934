// HDF5 plumbing private to hzp_harness: HZP_H5_CHECK (the HZP_CHECK_CALL instance for herr_t/htri_t
// results), HZP_H5_OWN (the same check for a returned hid_t, which it wraps in an owning Handle), the
// HDF5 error stack turned into text, and Handle, the RAII owner of one hid_t. The results writer and
// reader are the only users. The HDF5 here is not a thread-safe build: every call must come from one
// thread (the writer checks this; see results_file.hpp).
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::harness::h5 {

/// Held around every HDF5 call of the process: HDF5 is not built thread-safe here, and two threads make HDF5
/// calls in a run (rank 0's results thread, the results file; the main thread, checkpoints). A lock on each side
/// instead of moving checkpoints to the results thread, because checkpoint I/O is collective over every rank and
/// only rank 0 has that thread.
std::timed_mutex& calls_mutex() noexcept;

/// Switches HDF5's automatic error-stack printing off, process-wide and once: our errors carry the
/// stack's text instead, so a failure prints one message rather than a 20-line trace per call.
void quiet_errors() noexcept;

/// The current HDF5 error stack, outermost call first (each entry "description (minor message)"),
/// and clears it. Empty when HDF5 recorded nothing.
std::vector<std::string> take_error_stack();

/// One line from a stack: the outermost description and the innermost one with its minor message,
/// which together say what was asked and what actually went wrong ("unable to open file: truncated
/// file: eof = 1000, ..."). The middle entries only repeat the call chain.
std::string summarize_error_stack(const std::vector<std::string>& stack);

/// Whether a stack says the file is locked by another opener ("unable to lock file", "file lock request
/// failed"). Matches those phrases, not the bare word: "lock" also stands inside "superblock" and "block".
bool stack_says_locked(const std::vector<std::string>& stack);

/// Describer for HZP_CHECK_CALL: HDF5's own words plus what we were doing and to which file/object.
struct Describe {
  std::string what;  // "creating dataset 'steps/loss' in results file 'out.h5'"; may be empty
  std::string operator()(long long status) const;
};

/// Owns one HDF5 identifier (file, group, dataset, dataspace, datatype, attribute or property list)
/// and closes it with the matching H5?close. Move-only. Closing errors are ignored (a destructor must
/// not throw); use close_checked() where a failed close must be reported (the file itself).
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(hid_t id) noexcept : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ >= 0; }

  /// Closes now; errors ignored.
  void reset() noexcept;
  /// Closes now and returns the close call's status (negative on failure); the handle is empty after.
  herr_t close_checked() noexcept;

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// What a '/'-separated path inside a file names. Walks it one link at a time, because H5Lexists
/// on "a/b/c" is an error (not "no") when "a" is missing or "a/b" is a dataset.
enum class ObjectKind { absent, group, dataset, other };
ObjectKind object_kind(hid_t file, const std::string& path, std::string_view where);

template <typename WhatFn>
Handle own_checked(hid_t id, const char* stmt, const char* file, int line, const char* func, WhatFn&& what) {
  if (id < 0) [[unlikely]]
    ::hzp::detail::raise<::hzp::Hdf5Error>(
        ::hzp::detail::concat(stmt, " failed: ", Describe{what()}(static_cast<long long>(id))), file, line,
        func);
  return Handle(id);
}

}  // namespace hzp::harness::h5

/// HZP_H5_CHECK(H5Dwrite(...), "appending to '", name, "' in results file '", path, "'"): throws
/// hzp::Hdf5Error "<stmt> failed: <HDF5's message>; while <what>" when the herr_t/htri_t is negative.
#define HZP_H5_CHECK(stmt, ...)                           \
  HZP_CHECK_CALL(stmt, ::hzp::Hdf5Error, hzp_status >= 0, \
                 (::hzp::harness::h5::Describe{::hzp::detail::concat(__VA_ARGS__)}))

/// HZP_H5_OWN(H5Dopen2(...), "opening ...") -> h5::Handle; the same check for calls returning a hid_t.
#define HZP_H5_OWN(stmt, ...)                                                  \
  ::hzp::harness::h5::own_checked((stmt), #stmt, __FILE__, __LINE__, __func__, \
                                  [&]() { return ::hzp::detail::concat(__VA_ARGS__); })
