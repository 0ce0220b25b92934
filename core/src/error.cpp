// Error formatting and the process-wide rank/host used in error contexts.
#include "hzp/core/error.hpp"

#include <unistd.h>

#include <atomic>

namespace hzp {
namespace {
std::atomic<int> g_rank{-1};

std::string format_what(ErrorCode code, const std::string& message, const std::string& context) {
  std::string s = "[";
  s += error_code_name(code);
  s += " error] ";
  s += message;
  if (!context.empty()) {
    s += " (";
    s += context;
    s += ")";
  }
  return s;
}
}  // namespace

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::precondition: return "precondition";
    case ErrorCode::config: return "config";
    case ErrorCode::mpi: return "MPI";
    case ErrorCode::cuda: return "CUDA";
    case ErrorCode::nccl: return "NCCL";
    case ErrorCode::hdf5: return "HDF5";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::io: return "I/O";
    case ErrorCode::data: return "data";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_memory: return "out of memory";
  }
  return "unknown";
}

Error::Error(ErrorCode code, std::string message, std::string context)
    : std::runtime_error(format_what(code, message, context)),
      code_(code),
      message_(std::move(message)),
      context_(std::move(context)) {}

void set_process_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
int process_rank() noexcept { return g_rank.load(std::memory_order_relaxed); }

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return name;
}

namespace detail {
std::string make_context(const char* file, int line, const char* func) {
  std::string f = file;
  // Paths relative to the source tree read better than absolute build paths.
  for (const char* layer : {"core/", "kernels/", "collectives/", "workloads/", "schedulers/",
                            "harness/", "tests/", "bench/"}) {
    auto pos = f.rfind(layer);
    if (pos != std::string::npos) {
      f = f.substr(pos);
      break;
    }
  }
  const int r = process_rank();
  return concat("rank ", r >= 0 ? std::to_string(r) : std::string("?"), " on ", host_name(), ", in ",
                func, " at ", f, ":", line);
}
}  // namespace detail
}  // namespace hzp
