// SignalStop (harness/src/signal_stop.hpp) in a forked child, so that real signals hit a process of their
// own: the first SIGTERM/SIGINT/SIGUSR1 reaches the callback (once, on its thread), a second one ends the
// process by the signal at once, and the exit codes follow 128 + signo.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "signal_stop.hpp"

namespace hzp::harness {
namespace {

// Runs `body` in a child; returns its wait status. The child never returns into the test runner.
template <typename Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(SignalStop, FirstSignalCallsBackSecondEndsTheProcess) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int status = in_child([&] {
    SignalStop stop([&](int signo) {
      const char c = static_cast<char>(signo);
      (void)!::write(fds[1], &c, 1);
      std::this_thread::sleep_for(std::chrono::seconds(30));  // a run ending slowly: the second signal wins
    });
    ::raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(30));
    ::_exit(7);  // not reached when the second signal ends the process
  });
  ::close(fds[1]);
  char got = 0;
  ASSERT_EQ(::read(fds[0], &got, 1), 1) << "the callback never ran";
  EXPECT_EQ(got, SIGTERM);
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status) << " instead of dying";
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(SignalStop, EachCaughtSignalIsNamedAndHandledOnce) {
  for (const int sig : {SIGTERM, SIGINT, SIGUSR1}) {
    const int status = in_child([&] {
      std::atomic<int> calls{0}, seen{0};
      {
        SignalStop stop([&](int signo) {
          seen = signo;
          ++calls;
        });
        ::raise(sig);
        for (int i = 0; i < 200 && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ::_exit(calls.load() == 1 && seen.load() == sig ? 0 : 1);
    });
    ASSERT_TRUE(WIFEXITED(status)) << signal_name(sig) << " killed the child instead of being caught";
    EXPECT_EQ(WEXITSTATUS(status), 0) << signal_name(sig) << " was not passed to the callback exactly once";
  }
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(exit_code_for_signal(SIGTERM), 143);
  EXPECT_EQ(exit_code_for_signal(SIGINT), 130);
}

}  // namespace
}  // namespace hzp::harness
