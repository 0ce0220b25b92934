// The run's Chrome/Perfetto trace (`output.trace = true`): every rank records its events (units' compute
// from the phase timers, collectives from the counter records, the harness's own stages) in memory; at the
// end rank 0 gathers them over the harness communicator and writes one JSON file beside the results file,
// one process per rank and one track per thread (open it in ui.perfetto.dev or chrome://tracing).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/counters.hpp"
#include "hzp/core/trace_sink.hpp"

namespace hzp::harness {

class TraceRecorder final : public trace::Sink {
 public:
  /// Keeps at most `max_events` (later ones are counted as dropped, so memory stays bounded).
  explicit TraceRecorder(std::size_t max_events = 2'000'000);
  void record(trace::Event event) noexcept override;
  /// Adds one event per collective record: name = op, category "comm", args = group, elements, dtype,
  /// bytes per level, algorithm and the waits. `counters` names the groups.
  void add_collectives(std::span<const coll::CallRecord> records, const coll::CommCounters& counters);
  /// Names this rank's threads in the trace ("compute", "results", ...).
  void name_thread(std::uint64_t thread_id, std::string name);

  /// This rank's events as comma-separated JSON objects, timestamps in µs since `origin_s`
  /// (wall_seconds() of the run's start on rank 0) and `pid` = rank.
  std::string json_events(int rank, double origin_s) const;
  std::size_t dropped() const;

 private:
  mutable std::mutex mu_;
  std::size_t max_events_;
  std::size_t dropped_ = 0;
  std::vector<trace::Event> events_;
  std::vector<std::pair<std::uint64_t, std::string>> thread_names_;
};

/// Collective over `harness`: every rank's json_events reach rank 0, which writes `path` (the trace
/// file). Returns true on the rank that wrote it.
bool gather_and_write_trace(const TraceRecorder& recorder, coll::Communicator& harness, double origin_s,
                                   const std::string& path);

/// `results/x.h5` -> `results/x.trace.json`.
std::string trace_path_for(const std::string& results_path);

}  // namespace hzp::harness
