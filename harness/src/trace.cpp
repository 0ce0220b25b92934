// The run's trace (trace.hpp): events in memory per rank, collectives from counter records, and the
// gather to rank 0 that writes the Chrome trace JSON ({"traceEvents": [...]}, complete "X" events).
#include "trace.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "hzp/core/error.hpp"
#include "hzp/core/json_text.hpp"

namespace hzp::harness {
namespace {

constexpr int kSizeTag = 101;
constexpr int kDataTag = 102;


}  // namespace

TraceRecorder::TraceRecorder(std::size_t max_events) : max_events_(max_events) {}

void TraceRecorder::record(trace::Event event) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  try {
    events_.push_back(std::move(event));
  } catch (...) {
    ++dropped_;
  }
}

void TraceRecorder::add_collectives(std::span<const coll::CallRecord> records, const coll::CommCounters& counters) {
  for (const coll::CallRecord& r : records) {
    trace::Event e;
    e.name = std::string(coll::coll_op_name(r.op));
    e.category = "comm";
    e.start_s = r.start_s;
    e.duration_s = r.end_s - r.start_s;
    e.thread_id = r.thread_id;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "\"group\": \"%s\", \"group_size\": %d, \"seq\": %llu, \"elements\": %lld, \"dtype\": \"%s\", "
                  "\"bytes_intra\": %llu, \"bytes_inter\": %llu, \"algorithm\": \"%s\", \"wait_s\": %.9g, "
                  "\"join_wait_s\": %.9g, \"transfer_wait_s\": %.9g, \"emulated_s\": %.9g",
                  json_escape(counters.group_name(r.group)).c_str(), r.group_size,
                  static_cast<unsigned long long>(r.seq), static_cast<long long>(r.count),
                  std::string(dtype_name(r.dtype)).c_str(), static_cast<unsigned long long>(r.bytes[0]),
                  static_cast<unsigned long long>(r.bytes[1]), json_escape(r.algorithm).c_str(), r.wait_s,
                  r.join_wait_s, r.transfer_wait_s, r.emulated_s);
    e.args_json = buf;
    record(std::move(e));
  }
}

void TraceRecorder::name_thread(std::uint64_t thread_id, std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  thread_names_.emplace_back(thread_id, std::move(name));
}

std::size_t TraceRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

std::string TraceRecorder::json_events(int rank, double origin_s) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os.precision(3);
  os << std::fixed;
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  sep();
  os << R"({"ph": "M", "name": "process_name", "pid": )" << rank << R"(, "args": {"name": "rank )" << rank << "\"}}";
  sep();
  os << R"({"ph": "M", "name": "process_sort_index", "pid": )" << rank << R"(, "args": {"sort_index": )" << rank << "}}";
  for (const auto& [tid, name] : thread_names_) {
    sep();
    os << R"({"ph": "M", "name": "thread_name", "pid": )" << rank << ", \"tid\": " << tid
       << R"(, "args": {"name": ")" << json_escape(name) << "\"}}";
  }
  for (const trace::Event& e : events_) {
    sep();
    os << R"({"ph": "X", "name": ")" << json_escape(e.name) << R"(", "cat": ")" << json_escape(e.category)
       << R"(", "pid": )" << rank << ", \"tid\": " << e.thread_id << ", \"ts\": " << (e.start_s - origin_s) * 1e6
       << ", \"dur\": " << e.duration_s * 1e6;
    if (!e.args_json.empty()) os << ", \"args\": {" << e.args_json << "}";
    os << "}";
  }
  return os.str();
}

bool gather_and_write_trace(const TraceRecorder& recorder, coll::Communicator& harness, double origin_s,
                                   const std::string& path) {
  const int rank = harness.rank();
  std::string mine = recorder.json_events(rank, origin_s);
  std::int64_t n = static_cast<std::int64_t>(mine.size());
  if (rank != 0) {
    harness.send(ConstTensorView(&n, Shape{1}, DType::i64), 0, kSizeTag, StreamRef::host());
    harness.send(ConstTensorView(mine.data(), Shape{n}, DType::u8), 0, kDataTag, StreamRef::host());
    return false;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) HZP_THROW(IoError, "cannot write the trace file '", path, "'");
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n" << mine;
  for (int r = 1; r < harness.size(); ++r) {
    std::int64_t len = 0;
    harness.recv(TensorView(&len, Shape{1}, DType::i64), r, kSizeTag, StreamRef::host());
    std::string buf(static_cast<std::size_t>(len), '\0');
    if (len > 0) harness.recv(TensorView(buf.data(), Shape{len}, DType::u8), r, kDataTag, StreamRef::host());
    if (len > 0) out << ",\n" << buf;
  }
  out << "\n]}\n";
  if (!out) HZP_THROW(IoError, "writing the trace file '", path, "' failed");
  return true;
}

std::string trace_path_for(const std::string& results_path) {
  const std::string suffix = ".h5";
  if (results_path.size() > suffix.size() &&
      results_path.compare(results_path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return results_path.substr(0, results_path.size() - suffix.size()) + ".trace.json";
  return results_path + ".trace.json";
}

}  // namespace hzp::harness
