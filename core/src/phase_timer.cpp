// Phase timers (phase_timer.hpp) and the process-wide trace sink (trace_sink.hpp): per-thread exclusive
// totals kept in thread_local storage, and one atomic pointer to the installed sink.
#include "hzp/core/phase_timer.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "hzp/core/clock.hpp"
#include "hzp/core/trace_sink.hpp"

namespace hzp {
namespace trace {
namespace {
std::atomic<Sink*> g_sink{nullptr};
}  // namespace

void install(Sink* sink) noexcept { g_sink.store(sink, std::memory_order_release); }
Sink* active() noexcept { return g_sink.load(std::memory_order_acquire); }

std::uint64_t current_thread_id() noexcept {
  thread_local const std::uint64_t id = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  return id;
}

}  // namespace trace

namespace profile {
namespace {
thread_local PhaseTotals t_totals;
thread_local ScopedPhase* t_top = nullptr;
}  // namespace

std::string_view phase_name(Phase phase) noexcept {
  switch (phase) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::recompute: return "recompute";
    case Phase::optimizer: return "optimizer";
    case Phase::comm_wait: return "comm_wait";
    case Phase::pipeline_wait: return "pipeline_wait";
    case Phase::data: return "data";
  }
  return "unknown";
}

PhaseTotals PhaseTotals::operator-(const PhaseTotals& earlier) const noexcept {
  PhaseTotals d;
  for (int i = 0; i < kNumPhases; ++i) {
    d.seconds[i] = seconds[i] - earlier.seconds[i];
    d.scopes[i] = scopes[i] - earlier.scopes[i];
  }
  return d;
}

PhaseTotals thread_phase_totals() noexcept { return t_totals; }

ScopedPhase::ScopedPhase(Phase phase, std::string_view label) noexcept
    : phase_(phase), label_(label), start_s_(wall_seconds()), parent_(t_top) {
  t_top = this;
}

ScopedPhase::~ScopedPhase() {
  const double end = wall_seconds();
  const double elapsed = end - start_s_;
  const int i = static_cast<int>(phase_);
  t_totals.seconds[i] += elapsed - nested_s_;
  ++t_totals.scopes[i];
  if (parent_ != nullptr) parent_->nested_s_ += elapsed;
  t_top = parent_;
  if (trace::Sink* sink = trace::active()) {
    try {
      trace::Event e;
      e.name = label_.empty() ? std::string(phase_name(phase_)) : std::string(label_);
      e.category = std::string(phase_name(phase_));
      e.start_s = start_s_;
      e.duration_s = elapsed;
      e.thread_id = trace::current_thread_id();
      sink->record(std::move(e));
    } catch (...) {
      // Out of memory while building a trace event: the timeline loses one event, the run goes on.
    }
  }
}

}  // namespace profile
}  // namespace hzp
