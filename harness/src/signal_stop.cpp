// SignalStop (signal_stop.hpp): an async-signal-safe handler that stores the signal in a lock-free atomic,
// and a thread that polls it every 10 ms (a condition variable cannot be signalled from a handler).
#include "signal_stop.hpp"

#include <signal.h>
#include <string.h>
#include <time.h>

#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
std::atomic<int> g_caught{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free atomic");
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];
std::atomic<bool> g_installed{false};

extern "C" void on_termination_signal(int signo) {
  int none = 0;
  if (!g_caught.compare_exchange_strong(none, signo)) {
    // The second signal: the user (or Slurm) insists. The default action ends the process now.
    ::signal(signo, SIG_DFL);
    ::raise(signo);
  }
}

}  // namespace

int exit_code_for_signal(int signo) noexcept { return 128 + signo; }

std::string signal_name(int signo) {
  switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal " + std::to_string(signo);
  }
}

SignalStop::SignalStop(std::function<void(int)> on_signal) : on_signal_(std::move(on_signal)) {
  HZP_CHECK(!g_installed.exchange(true), "SignalStop: one per process");
  g_caught.store(0);
  struct sigaction sa{};
  sa.sa_handler = on_termination_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a caught signal must not turn a blocking call of the run into an error
  for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &sa, &g_previous[i]);
  thread_ = std::thread([this] { loop(); });
}

SignalStop::~SignalStop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed.store(false);
}

void SignalStop::loop() {
  const timespec tick{0, 10'000'000L};
  while (!stop_.load()) {
    if (const int signo = g_caught.load(); signo != 0) {
      on_signal_(signo);
      return;
    }
    nanosleep(&tick, nullptr);
  }
}

}  // namespace hzp::harness
