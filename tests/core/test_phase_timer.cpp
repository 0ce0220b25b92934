// Phase timers: exclusive accounting of nested scopes, per-thread totals, and trace events reported only
// while a sink is installed.
#include "hzp/core/phase_timer.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "hzp/core/trace_sink.hpp"

namespace hzp::profile {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(PhaseTimer, NestedScopeIsNotCountedInItsParent) {
  // No upper bound on any duration (a loaded machine stretches sleeps): exclusive accounting means the two
  // phases together never exceed the wall time around the outer scope, which a nested scope counted in its parent
  // (30 ms twice) would break however slow the machine is.
  const PhaseTotals before = thread_phase_totals();
  const auto t0 = std::chrono::steady_clock::now();
  {
    ScopedPhase bwd(Phase::backward, "block.0");
    sleep_ms(20);
    {
      ScopedPhase re(Phase::recompute, "block.0");
      sleep_ms(30);
    }
    sleep_ms(10);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const PhaseTotals d = thread_phase_totals() - before;
  EXPECT_GE(d.of(Phase::recompute), 0.030);
  EXPECT_GE(d.of(Phase::backward), 0.030);
  EXPECT_LE(d.of(Phase::backward) + d.of(Phase::recompute), wall) << "the nested recompute leaked into backward";
  EXPECT_EQ(d.scopes[static_cast<int>(Phase::backward)], 1u);
  EXPECT_EQ(d.scopes[static_cast<int>(Phase::recompute)], 1u);
  EXPECT_EQ(d.of(Phase::forward), 0.0);
}

TEST(PhaseTimer, TotalsArePerThread) {
  const PhaseTotals before = thread_phase_totals();
  std::thread t([] {
    ScopedPhase f(Phase::forward);
    sleep_ms(15);
  });
  t.join();
  EXPECT_EQ((thread_phase_totals() - before).of(Phase::forward), 0.0);
}

struct CollectingSink final : trace::Sink {
  std::mutex mu;
  std::vector<trace::Event> events;
  void record(trace::Event e) noexcept override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
};

TEST(PhaseTimer, ReportsTraceEventsOnlyWhileASinkIsInstalled) {
  CollectingSink sink;
  { ScopedPhase f(Phase::forward, "embedding"); }
  trace::install(&sink);
  {
    ScopedPhase b(Phase::backward, "head");
    ScopedPhase r(Phase::recompute, "head");
  }
  { ScopedPhase o(Phase::optimizer); }
  trace::install(nullptr);
  { ScopedPhase f(Phase::forward, "embedding"); }
  ASSERT_EQ(sink.events.size(), 3u);
  EXPECT_EQ(sink.events[0].name, "head");  // the inner scope ends first
  EXPECT_EQ(sink.events[0].category, "recompute");
  EXPECT_EQ(sink.events[1].category, "backward");
  EXPECT_LE(sink.events[1].start_s, sink.events[0].start_s);
  EXPECT_GE(sink.events[1].duration_s, sink.events[0].duration_s);
  EXPECT_EQ(sink.events[2].name, "optimizer") << "an unlabelled scope is named after its phase";
  EXPECT_EQ(sink.events[2].thread_id, trace::current_thread_id());
}

}  // namespace
}  // namespace hzp::profile
