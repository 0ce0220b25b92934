// The process-wide trace sink: a timeline of what each thread did (a unit's forward, a collective, the
// optimizer), which the harness writes as a Chrome/Perfetto trace when `output.trace = true`. Any layer
// reports into it; when no sink is installed a report costs one relaxed atomic load, so the hooks stay
// in place in every run.
#pragma once

#include <cstdint>
#include <string>

namespace hzp::trace {

/// One complete event ("ph": "X" in the Chrome trace format): what ran on which thread, and when.
struct Event {
  std::string name;             ///< "block.3", "all_gather", "optimizer"
  std::string category;         ///< "forward", "backward", "recompute", "comm", ...
  double start_s = 0;           ///< wall_seconds() at the start (CLOCK_MONOTONIC)
  double duration_s = 0;
  std::uint64_t thread_id = 0;  ///< Linux thread id (gettid), as collective counters record it
  /// Extra fields as the body of a JSON object without braces, e.g. "\"bytes\": 1024, \"group\": \"z3\""
  /// (empty for none). Must be valid JSON: the sink copies it verbatim.
  std::string args_json;
};

/// Receives events from any thread, concurrently.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void record(Event event) noexcept = 0;
};

/// Installs `sink` (nullptr uninstalls). The caller keeps it alive until it is uninstalled and no thread
/// can still be inside a report (the harness uninstalls after the scheduler and its threads are gone).
void install(Sink* sink) noexcept;
/// The installed sink, or nullptr: the one check every hook makes first.
Sink* active() noexcept;
/// The calling thread's Linux thread id (cached per thread).
std::uint64_t current_thread_id() noexcept;

}  // namespace hzp::trace
