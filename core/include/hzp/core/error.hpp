// Typed exceptions and the one family of check macros used by every layer (docs/architecture.md,
// Conventions).
// Library code throws; only `main` decides to exit. Each error carries the failed statement, the
// function, file and line, and the rank and host that raised it, so a message from rank 5 of 64 is
// useful on its own. Backend-specific macros (HZP_MPI_CHECK, HZP_CUDA_CHECK, HZP_NCCL_CHECK,
// HZP_H5_CHECK) are thin instances of HZP_CHECK_CALL defined beside the library they wrap.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hzp {

enum class ErrorCode {
  precondition,  // a caller broke a documented requirement (shapes, sizes, states)
  config,        // a configuration value is invalid; the message names key, value and fix
  mpi,
  cuda,
  nccl,
  hdf5,
  timeout,       // a wait on communication passed its deadline
  io,            // files: missing, unwritable, truncated
  data,          // corrupt or inconsistent input data
  unsupported,   // a valid request this build cannot serve (e.g. CUDA absent)
  out_of_memory, // a backing refused, or a configured reserved-bytes limit would be exceeded
};

const char* error_code_name(ErrorCode code) noexcept;

/// Base of every hzpbench exception. what() is the full, formatted message.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, std::string context);
  ErrorCode code() const noexcept { return code_; }
  /// The message without location context (what a user-facing summary prints).
  const std::string& message() const noexcept { return message_; }
  /// "rank R on HOST, in FUNC at FILE:LINE" (empty for errors raised without a location).
  const std::string& context() const noexcept { return context_; }

 private:
  ErrorCode code_;
  std::string message_;
  std::string context_;
};

#define HZP_DEFINE_ERROR(Name, Code)                                              \
  class Name : public Error {                                                     \
   public:                                                                        \
    Name(std::string message, std::string context = {})                           \
        : Error(ErrorCode::Code, std::move(message), std::move(context)) {}       \
    static constexpr ErrorCode kCode = ErrorCode::Code;                           \
  };
HZP_DEFINE_ERROR(PreconditionError, precondition)
HZP_DEFINE_ERROR(ConfigError, config)
HZP_DEFINE_ERROR(MpiError, mpi)
HZP_DEFINE_ERROR(CudaError, cuda)
HZP_DEFINE_ERROR(NcclError, nccl)
HZP_DEFINE_ERROR(Hdf5Error, hdf5)
HZP_DEFINE_ERROR(TimeoutError, timeout)
HZP_DEFINE_ERROR(IoError, io)
HZP_DEFINE_ERROR(DataError, data)
HZP_DEFINE_ERROR(UnsupportedError, unsupported)
HZP_DEFINE_ERROR(OutOfMemoryError, out_of_memory)
#undef HZP_DEFINE_ERROR

/// The rank this process reports in error contexts. Set once by whoever initialises MPI; -1 = unknown.
void set_process_rank(int rank) noexcept;
int process_rank() noexcept;
/// Cached host name of this process.
const std::string& host_name();

namespace detail {

inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
/// Concatenates any streamable arguments into one message string.
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append_all(os, args...);
  return os.str();
}

std::string make_context(const char* file, int line, const char* func);

template <typename E>
[[noreturn]] void raise(std::string message, const char* file, int line, const char* func) {
  throw E(std::move(message), make_context(file, line, func));
}

}  // namespace detail
}  // namespace hzp

/// Precondition check: HZP_CHECK(n % w == 0, "n=", n, " is not divisible by w=", w).
#define HZP_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      ::hzp::detail::raise<::hzp::PreconditionError>(                                         \
          ::hzp::detail::concat(__VA_ARGS__ __VA_OPT__(, ) " [check: " #cond "]"), __FILE__, \
          __LINE__, __func__);                                                                \
  } while (0)

/// Throws ErrorType with a message built from the arguments, with the location attached.
#define HZP_THROW(ErrorType, ...) \
  ::hzp::detail::raise<ErrorType>(::hzp::detail::concat(__VA_ARGS__), __FILE__, __LINE__, __func__)

/// The generic call check every backend macro is an instance of: evaluates `stmt` once into
/// `hzp_status`, and when `is_ok` (an expression over hzp_status) is false throws ErrorType with
/// "<stmt> failed: <describe(hzp_status)>".
#define HZP_CHECK_CALL(stmt, ErrorType, is_ok, describe)                                     \
  do {                                                                                       \
    auto hzp_status = (stmt);                                                                \
    if (!(is_ok)) [[unlikely]]                                                               \
      ::hzp::detail::raise<ErrorType>(::hzp::detail::concat(#stmt " failed: ",              \
                                                            describe(hzp_status)),           \
                                      __FILE__, __LINE__, __func__);                         \
  } while (0)
