// The intra-operation pool (intra_op.hpp). Workers spin briefly between jobs (a step's kernels follow each other
// within microseconds, and a futex wake-up per kernel would cost more than many of them take), then sleep on the
// job counter. Each worker's range is claimed once per job, by the worker or, once the caller has finished its own
// range, by the caller: a worker still asleep or descheduled by other work on its core does not hold up the job
// (the caller runs its range), and the caller waits only for the ranges workers have claimed, spinning, then
// sleeping on the count of those done.
#include "hzp/core/intra_op.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::core {
namespace {

using Clock = std::chrono::steady_clock;
// How long a worker (or the caller) polls before sleeping: long enough to span the gaps between a step's
// kernels, short enough that an idle rank gives its cores back (communication waits, the optimizer's host work).
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls pred() for up to kSpin, then blocks on `word` changing from the value pred saw false with.
template <typename T, typename Pred>
void spin_then_wait(const std::atomic<T>& word, Pred pred) {
  const auto until = Clock::now() + kSpin;
  for (unsigned i = 0;; ++i) {
    const T seen = word.load(std::memory_order_acquire);
    if (pred(seen)) return;
    if ((i & 63U) == 63U && Clock::now() > until) {
      word.wait(seen, std::memory_order_acquire);
    } else {
      cpu_relax();
    }
  }
}

thread_local bool t_inside = false;  // this thread is running a range of some parallel_for

class Pool {
 public:
  ~Pool() { stop_workers(); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    HZP_CHECK(n >= 1, "set_intra_op_threads: ", n, " threads; at least 1 (the caller)");
    std::lock_guard lock(use_);
    if (n == threads()) return;
    stop_workers();
    errors_.assign(static_cast<std::size_t>(n), nullptr);
    ranges_.assign(static_cast<std::size_t>(n), {0, 0});
    claims_ = std::vector<Claim>(static_cast<std::size_t>(n));
    // Each worker starts from the job count of now, so a job posted before its thread first runs is not missed.
    const std::uint64_t now = job_.load(std::memory_order_acquire);
    for (int w = 1; w < n; ++w) workers_.emplace_back([this, w, now] { work(w, now); });
  }

  std::int64_t ranges(std::int64_t n, std::int64_t grain) const {
    return std::max<std::int64_t>(1, std::min<std::int64_t>(threads(), n / std::max<std::int64_t>(grain, 1)));
  }

  void run(std::int64_t n, std::int64_t grain, const std::function<void(int, std::int64_t, std::int64_t)>& fn) {
    const std::int64_t chunks = ranges(n, grain);
    std::unique_lock lock(use_, std::defer_lock);
    if (chunks < 2 || t_inside || !lock.try_lock()) {
      if (n > 0) fn(0, 0, n);
      return;
    }
    for (std::int64_t c = 0; c < threads(); ++c)
      ranges_[static_cast<std::size_t>(c)] = c < chunks ? std::pair{n * c / chunks, n * (c + 1) / chunks}
                                                        : std::pair<std::int64_t, std::int64_t>{0, 0};
    fn_ = &fn;
    // Only the thread holding use_ moves job_ (stop_workers runs under it too), so the next value is known here and
    // every worker's range can be opened for it before the job is published.
    const std::uint64_t job = job_.load(std::memory_order_relaxed) + 1;
    for (std::size_t w = 1; w < claims_.size(); ++w) claims_[w].word.store(open(job), std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    job_.store(job, std::memory_order_release);
    job_.notify_all();
    run_range(0);
    // Then every range no worker has claimed yet: the same ranges with the same numbers, so results and per-range
    // scratch are as if each worker had run its own.
    int claimed = 0;
    for (std::size_t w = 1; w < claims_.size(); ++w) {
      std::uint64_t expect = open(job);
      if (claims_[w].word.compare_exchange_strong(expect, open(job) + kByCaller, std::memory_order_acq_rel))
        run_range(static_cast<int>(w));
      else
        ++claimed;
    }
    spin_then_wait(done_, [claimed](int d) { return d == claimed; });
    fn_ = nullptr;
    for (auto& e : errors_)
      if (e) std::rethrow_exception(std::exchange(e, nullptr));
  }

 private:
  void run_range(int slot) {
    const auto [b, e] = ranges_[static_cast<std::size_t>(slot)];
    if (b == e) return;
    t_inside = true;
    try {
      (*fn_)(slot, b, e);
    } catch (...) {
      errors_[static_cast<std::size_t>(slot)] = std::current_exception();
    }
    t_inside = false;
  }

  void work(int slot, std::uint64_t seen) {
    Claim& mine = claims_[static_cast<std::size_t>(slot)];
    for (;;) {
      spin_then_wait(job_, [seen](std::uint64_t j) { return j != seen; });
      seen = job_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      // Fails when the caller took the range (or a later job has opened it already): then fn_ and ranges_ belong
      // to a job this worker has no part in, and it waits for the next.
      std::uint64_t expect = open(seen);
      if (!mine.word.compare_exchange_strong(expect, open(seen) + kByWorker, std::memory_order_acq_rel)) continue;
      run_range(slot);
      done_.fetch_add(1, std::memory_order_acq_rel);  // publishes the range's writes to the caller
      done_.notify_all();                             // no system call unless the caller sleeps on it
    }
  }

  void stop_workers() {
    stop_.store(true, std::memory_order_release);
    job_.fetch_add(1, std::memory_order_release);
    job_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_.store(false, std::memory_order_release);
  }

  // A worker range's state in one job: open(job), then open(job) + kByWorker or + kByCaller once claimed. Four
  // values per job, so a claim for one job never matches another's.
  static constexpr std::uint64_t open(std::uint64_t job) { return 4 * job; }
  static constexpr std::uint64_t kByWorker = 1, kByCaller = 2;
  struct alignas(64) Claim {  // one cache line each: workers claim at once without sharing a line
    std::atomic<std::uint64_t> word{0};
  };

  std::mutex use_;  // held by the thread whose parallel_for owns the workers
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> job_{0};  // bumped once per job (and to stop)
  std::vector<Claim> claims_ = std::vector<Claim>(1);  // per slot; slot 0 (the caller's own) is never claimed
  std::atomic<int> done_{0};           // ranges workers claimed and finished in the current job
  std::atomic<bool> stop_{false};
  const std::function<void(int, std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges_{{0, 0}};  // per slot; slot 0 is the caller
  std::vector<std::exception_ptr> errors_{nullptr};
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void set_intra_op_threads(int n) { pool().resize(n); }

int intra_op_threads() { return pool().threads(); }

void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  pool().run(n, grain, [&fn](int, std::int64_t b, std::int64_t e) { fn(b, e); });
}

int intra_op_ranges(std::int64_t n, std::int64_t grain) { return static_cast<int>(pool().ranges(n, grain)); }

void parallel_for_ranges(std::int64_t n, std::int64_t grain,
                         const std::function<void(int, std::int64_t, std::int64_t)>& fn) {
  pool().run(n, grain, fn);
}

}  // namespace hzp::core
