// The heartbeat, the watchdog thread and the last-collectives text it prints (watchdog.hpp).
#include "watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "hzp/collectives/counters.hpp"
#include "hzp/core/clock.hpp"

namespace hzp::harness {

void Progress::beat(std::int64_t step, const char* where) noexcept {
  step_.store(step, std::memory_order_relaxed);
  where_.store(where, std::memory_order_relaxed);
  last_unix_.store(unix_seconds(), std::memory_order_relaxed);
  last_wall_.store(wall_seconds(), std::memory_order_release);
}

double Progress::seconds_since() const noexcept { return wall_seconds() - last_wall_.load(std::memory_order_acquire); }

Watchdog::Watchdog(double limit_s, const Progress& progress, std::function<void(double)> on_stall)
    : limit_s_(limit_s), progress_(progress), on_stall_(std::move(on_stall)) {
  if (limit_s_ > 0) thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::loop() {
  // Checking ten times per limit keeps the detection delay within 10% of it, capped at one second.
  const auto period = std::chrono::duration<double>(std::min(1.0, limit_s_ / 10));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) return;
    const double idle = progress_.seconds_since();
    if (idle >= limit_s_) {
      lock.unlock();
      on_stall_(idle);  // ends the job; if it returns, the watchdog has done its part
      return;
    }
  }
}

std::string last_collectives_text(std::span<coll::CommCounters* const> counters, int n) {
  struct Line {
    double end_s;
    std::string text;
  };
  std::vector<Line> lines;
  const double now = wall_seconds();
  for (coll::CommCounters* c : counters) {
    if (c == nullptr) continue;
    const std::uint64_t calls = c->calls();
    const std::uint64_t from = calls > static_cast<std::uint64_t>(n) ? calls - static_cast<std::uint64_t>(n) : 0;
    for (const coll::CallRecord& r : c->records(from)) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s #%llu %s %lld x %s (thread %llu), started %.3f s ago, took %.3f s",
                    c->group_name(r.group).c_str(), static_cast<unsigned long long>(r.seq),
                    std::string(coll::coll_op_name(r.op)).c_str(), static_cast<long long>(r.count),
                    std::string(dtype_name(r.dtype)).c_str(), static_cast<unsigned long long>(r.thread_id), now - r.start_s,
                    r.end_s - r.start_s);
      lines.push_back({r.end_s, buf});
    }
  }
  if (lines.empty()) return "no collective completed on this rank";
  std::sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) { return a.end_s < b.end_s; });
  if (lines.size() > static_cast<std::size_t>(n)) lines.erase(lines.begin(), lines.end() - n);
  std::string out = "last completed collectives, oldest first:";
  for (const Line& l : lines) out += "\n    " + l.text;
  return out;
}

}  // namespace hzp::harness
