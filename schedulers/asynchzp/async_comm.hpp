// asynchzp's asynchronous scheduling (AsyncHZP, arXiv 2510.20111 §4.2 / Fig. 3; docs/data-parallel.md
// "Asynchronous scheduling"): two background threads, each with its own duplicated communicators, and
// the persistent ring pool their buffers come from.
//   - the parameter thread issues the all-gathers of the step's gather schedule ahead of use (at most
//     scheduler.prefetch units ahead of the compute thread, and never more than its ring holds) and the
//     step-end parameter all-gather (per unit, just before the unit's first gather of the next step);
//   - the gradient thread issues and drains the per-micro-batch reduce-scatters and the step-end
//     gradient exchange (queued by the scheduler per unit), releasing each gradient block as soon as its
//     reduce-scatter completes.
// The compute thread only queues work and waits where it consumes data (the parameters of the unit it is
// about to run; the reduced gradients before the optimizer). An exception on a background thread is kept,
// every later task on that thread fails with it without communicating, and the compute thread rethrows it
// at its next wait: one clear error. Every wait has a deadline.
//
// On a CUDA compute stream (docs/cuda.md, "asynchzp on the GPU") each thread also owns a stream, its lane:
// everything the thread enqueues (its collectives over its own communicators, copies, the accumulating add) is
// ordered on it, and the streams meet only through events, the paper's Fig. 3 right:
//   - a task's completion is an event recorded on its lane; the compute stream waits on it only where it uses
//     the result (a gathered block right before the unit that consumes it; the lanes at the step's end);
//   - a ring slot released by one stream and acquired by another carries a fence (RingFence): the releaser
//     records it, the acquirer's stream waits on it (a gather waits for the compute stream to be done with the
//     slot's last block, a gradient block for the reduce-scatter that read it);
//   - a reduce-scatter waits on an event recorded right after the backward that made its gradient final, and a
//     step's first refresh and gathers on one recorded after the last update.
// Issuing never makes the compute stream wait. Scratch that a lane's queued work still uses is held until the
// lane has passed it (StreamScratch): the caching allocator knows no streams.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/ring_pool.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"
#include "hzp/schedulers/asynchzp.hpp"
#include "asynchzp/asynchzp_segments.hpp"
#include "hzp/schedulers/step/schedule.hpp"

namespace hzp::schedulers {

/// Completion of one task run by a CommThread. Copyable handle; wait() rethrows the task's exception.
class Ticket {
 public:
  Ticket() = default;
  bool valid() const noexcept { return static_cast<bool>(state_); }
  /// Blocks until the task has run (at most `deadline`, then TimeoutError naming `what`); rethrows its
  /// exception. A default-constructed ticket returns at once.
  void wait(std::chrono::nanoseconds deadline, const char* what) const;
  /// After wait(): makes `s` wait (on the device) for the work the task enqueued on its thread's lane. False
  /// when there is nothing to wait for (a host lane, or no task).
  bool order(StreamRef s) const;

 private:
  friend class CommThread;
  struct State {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::unique_ptr<Event> enqueued;  // recorded on the lane after the task (CUDA lanes only)
  };
  std::shared_ptr<State> state_;
};

/// One background thread running queued tasks in order. After a task throws, later tasks are not run:
/// their tickets complete with the first error.
class CommThread {
 public:
  /// `lane`: the stream the thread's tasks enqueue on (the host stream, or a CUDA stream whose device the
  /// thread makes current before its first task).
  explicit CommThread(std::string name, StreamRef lane = StreamRef::host());
  /// Runs what is queued, then joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  Ticket submit(std::function<void()> task);
  const std::string& name() const noexcept { return name_; }

 private:
  void run();
  std::string name_;
  StreamRef lane_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Ticket::State>>> queue_;
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread thread_;
};

/// The device-side release of a ring's slots when they are released by one stream and acquired by another:
/// the releasing stream records it just before a slot goes back (host side), and the acquiring stream waits on
/// it before it writes the slot. One event per ring, re-recorded at every release: a wait on the latest record
/// covers every earlier release on the same stream, the slot's own among them. No-ops on the host.
class RingFence {
 public:
  explicit RingFence(Device d) : event_(d) {}
  void record(StreamRef s);
  /// False on the host (nothing to wait for).
  bool wait(StreamRef s);

 private:
  std::mutex m_;
  Event event_;
};

/// A unit's full block: a ring slot, or a caching-allocator block (fallback and inline paths). A slot with a
/// fence records it on `release_on` when released.
class Block {
 public:
  Block() = default;
  explicit Block(Allocation a) : alloc_(std::move(a)) {}
  explicit Block(RingSlot s, RingFence* fence = nullptr, StreamRef release_on = StreamRef::host())
      : slot_(std::move(s)), fence_(fence), release_on_(release_on) {}
  ~Block() { reset(); }
  Block(Block&& o) noexcept
      : alloc_(std::move(o.alloc_)), slot_(std::move(o.slot_)), fence_(o.fence_), release_on_(o.release_on_) {}
  Block& operator=(Block&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = std::move(o.alloc_);
      slot_ = std::move(o.slot_);
      fence_ = o.fence_;
      release_on_ = o.release_on_;
    }
    return *this;
  }
  void* data() const noexcept { return slot_ ? slot_.data() : alloc_.data(); }
  template <typename T>
  T* data_as() const noexcept {
    return static_cast<T*>(data());
  }
  explicit operator bool() const noexcept { return static_cast<bool>(slot_) || static_cast<bool>(alloc_); }
  void reset() noexcept;

 private:
  Allocation alloc_;
  RingSlot slot_;
  RingFence* fence_ = nullptr;
  StreamRef release_on_ = StreamRef::host();
};

/// The parameter blocks a schedule gathers, in the order its actions consume them (FirstUseGathers).
/// With `reuse` (scheduler.pp_reuse, StageReuse) blocks kept across neighbouring actions are gathered once.
std::vector<int> gather_order(const workloads::ParamLayout& layout, const std::vector<Action>& actions,
                              bool reuse = false);
/// The same with, per gather, whether the block stays held past the end of the action that gathers it
/// (reuse): such a block is gathered into allocator memory, not a ring slot, since the ring is sized for the
/// blocks in flight and would otherwise stall behind it.
struct GatherEntry {
  int block = 0;
  bool held = false;
};
std::vector<GatherEntry> gather_plan(const workloads::ParamLayout& layout, const std::vector<Action>& actions,
                                     bool reuse);

class AsyncComm {
 public:
  struct Setup {
    const workloads::ParamLayout* layout = nullptr;
    const Segments* seg = nullptr;
    coll::Communicator* z3 = nullptr;  ///< duplicated here for the parameter thread
    coll::Communicator* z2 = nullptr;  ///< duplicated here for the gradient thread
    CachingAllocator* alloc = nullptr;
    DType param_dtype = DType::f32;
    int prefetch = 1;
    double pool_mb = 0;
    SchedulerOptions::PoolFallback fallback = SchedulerOptions::PoolFallback::error;
    StreamRef compute = StreamRef::host();  ///< the compute stream (a CUDA one gives each thread a lane)
  };
  /// Builds the pool (ConfigError naming the sizes when a unit does not fit and fallback is error) and
  /// starts the threads. Collective over the groups (duplicates the communicators).
  explicit AsyncComm(const Setup& s);
  ~AsyncComm();

  RingPool* pool() noexcept { return pool_.get(); }
  /// Starts a step that runs the schedule `actions` over the shards `params` (param dtype, l3 slices) and
  /// `grads` (fp32, l2 slices; int64 in deterministic mode): its gathers, in the order the actions consume
  /// them (gather_order), and the first `prefetch` of them queued. `refresh`, when set, brings unit u's
  /// shard up to date (the last step's parameter all-gather): every unit's is queued at once, in the order
  /// the step first gathers them, on the gradient thread (idle until this step's first backward), and a
  /// unit's first gather waits for its refresh. So the inter-node refreshes run back to back while the
  /// parameter thread's intra-node gathers of the units already refreshed go on beside them, neither held
  /// back by the prefetch depth nor queued behind the other, and the forward of the units refreshed first
  /// overlaps the refresh of the rest.
  void begin_step(const std::vector<Action>& actions, bool reuse, TensorView params, TensorView grads,
                  std::function<void(int)> refresh = {});
  /// Runs the refresh of every unit not yet refreshed this step and waits for all of them; afterwards
  /// the shards may be written (by the optimizer): the compute stream is after both lanes.
  void finish_refresh();
  /// The next gathered block of the schedule, which must be `unit` (PreconditionError otherwise); waits
  /// for it and queues the next gather.
  Block next_gathered(int unit);
  /// A zero-padded fp32 gradient block for `unit` from the gradient ring (waits for room).
  Block grad_block(int unit);
  /// Queues the reduce-scatter of `unit`'s final gradient into the gradient shard (the block holds the
  /// shard's dtype: fp32 from grad_block(), or int64 fixed point in deterministic mode).
  void reduce_scatter(int unit, Block block, bool accumulate);
  /// Waits (host) for every queued reduce-scatter to be issued; on a GPU the caller joins the gradient lane once
  /// its thread is idle (compute_after_grad_lane).
  void finish_reduce_scatters();
  /// Runs `task` on the parameter / gradient thread (after what is queued there).
  Ticket on_param_thread(std::function<void()> task) { return param_thread_->submit(std::move(task)); }
  Ticket on_grad_thread(std::function<void()> task) { return grad_thread_->submit(std::move(task)); }
  /// The deadline of every wait of the compute thread on a background thread.
  std::chrono::nanoseconds deadline() const noexcept { return deadline_; }
  /// The gather schedule of one micro-batch (units in the order they are gathered).
  const std::vector<int>& gathers_this_step() const noexcept { return order_; }
  AsyncHzpStats stats() const;
  /// Waits for `t` (deadline()) and records the interval as a background wait of this step; with `use`, the
  /// compute stream also waits (on the device) for what the task enqueued: the result is used next.
  void wait(const Ticket& t, const char* what, bool use = false);
  /// Makes the threads' lanes wait for the work enqueued on the compute stream so far (the last update before
  /// a refresh reads the optimizer slices); no-op on the host.
  void lanes_after_compute();
  /// Makes the compute stream wait for everything enqueued on the parameter / gradient lane so far (after
  /// waiting for the thread's tickets: the thread is idle). No-op on the host.
  void compute_after_param_lane();
  void compute_after_grad_lane();
  /// The lanes and their scratch keepers, for the scheduler's step-end groups run on the threads.
  StreamRef param_lane() const noexcept { return param_lane_.ref(); }
  StreamRef grad_lane() const noexcept { return grad_lane_.ref(); }
  StreamScratch& param_scratch() noexcept { return *param_scratch_; }
  StreamScratch& grad_scratch() noexcept { return *grad_scratch_; }
  /// Completes the collectives the lanes have ordered (CUDA: their requests are kept, engine_memory.hpp), each
  /// on its thread, plus `param_extra` / `grad_extra` there; call once the compute stream has passed them.
  void complete_requests(std::function<void()> param_extra = {}, std::function<void()> grad_extra = {});
  /// This step's background waits (StepStats::background_waits); cleared by begin_step().
  const std::vector<std::pair<double, double>>& background_waits() const noexcept { return waits_; }

 private:
  void queue_gather(std::size_t k);
  // Runs `enqueue_wait` (a wait of the compute stream on a lane's communication, where its result is used) under
  // the stall clock the step driver observes on this thread (device_stall_clock.hpp), when there is one.
  template <typename F>
  void compute_waits(F&& enqueue_wait) {
    coll::time_device_wait(s_.compute, coll::StallKind::at_use, std::forward<F>(enqueue_wait));
  }
  // Runs `wait_for` (the compute thread waiting on the background threads' communication) as a communication wait (a
  // watchdog must not take this rank, waiting for a stalled peer through them, for the one that stopped) and records
  // its interval as a background wait of this step. Defined in async_comm.cpp, its only user.
  template <typename F>
  void background_wait(F&& wait_for);
  // The compute stream waits for everything enqueued on `lane` so far (its thread is idle: the caller waited).
  void join_lane(StreamRef lane);
  void queue_refresh(int unit);
  bool fits(RingId ring, std::size_t bytes) const;
  Setup s_;
  std::vector<int> order_;  // this step's gathers: the block of each, in the order they are consumed
  std::vector<bool> held_;  // per gather: kept past its action (pp_reuse), so gathered into allocator memory
  std::vector<bool> shared_;  // per unit: used by another unit (held across units)
  std::unique_ptr<coll::Communicator> z3_, z2_;
  std::unique_ptr<GatherScatter> gather_, rs_;                // on the threads' duplicates
  std::unique_ptr<GatherScatter> gather_inline_, rs_inline_;  // fallbacks, on the compute thread's groups
  std::unique_ptr<RingPool> pool_;
  RingId ag_ring_, ag_shared_ring_, rs_ring_, rs_shared_ring_;
  // Released on the compute stream, acquired by the parameter lane (gathers); released on the gradient lane,
  // acquired by the compute stream (gradient blocks).
  std::unique_ptr<RingFence> ag_fence_, rs_fence_;
  Stream param_lane_, grad_lane_;  // host streams unless the compute stream is a CUDA one
  std::unique_ptr<StreamScratch> param_scratch_, grad_scratch_;
  std::chrono::nanoseconds deadline_;
  TensorView params_, grads_;

  std::size_t next_queue_ = 0, next_consume_ = 0;
  struct Pending {
    Ticket ticket;
    std::shared_ptr<Block> block;
    int unit = -1;
  };
  std::deque<Pending> gathers_;
  std::vector<Ticket> scatters_;
  std::function<void(int)> refresh_;   // this step's per-unit refresh (empty when none is due)
  std::vector<Ticket> refreshes_;       // per unit: its refresh this step (invalid: not queued)
  std::vector<std::pair<double, double>> waits_;  // compute thread only
  mutable std::mutex stats_m_;
  AsyncHzpStats stats_;
  std::unique_ptr<CommThread> param_thread_, grad_thread_;  // last: joined first
};

}  // namespace hzp::schedulers
