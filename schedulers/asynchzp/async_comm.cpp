// AsyncComm and CommThread (async_comm.hpp): asynchzp's background threads, gather schedule and pool.
#include "asynchzp/async_comm.hpp"
#include "asynchzp/ring_sizing.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "hzp/schedulers/step/first_use_gathers.hpp"
#include "hzp/schedulers/step/stage_reuse.hpp"
#include "hzp/collectives/comm_wait_observer.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {

// --- Ticket / CommThread ------------------------------------------------------------------------------

void Ticket::wait(std::chrono::nanoseconds deadline, const char* what) const {
  if (!state_) return;
  std::unique_lock lock(state_->m);
  if (!state_->cv.wait_for(lock, deadline, [&] { return state_->done; }))
    HZP_THROW(TimeoutError, "asynchzp: the compute thread waited ",
              std::chrono::duration<double>(deadline).count(), " s for ", what,
              " from a background thread; it never completed (a peer rank failed or stopped?)");
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Ticket::order(StreamRef s) const {
  if (!state_ || !state_->enqueued) return false;
  state_->enqueued->wait(s);
  return true;
}

CommThread::CommThread(std::string name, StreamRef lane)
    : name_(std::move(name)), lane_(lane), thread_([this] { run(); }) {}

CommThread::~CommThread() {
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Ticket::State>>> dropped;
  {
    std::lock_guard lock(m_);
    stop_ = true;
    // Tasks not started are dropped: a scheduler being destroyed after a failed step must not start
    // collectives its peers will never join.
    dropped.swap(queue_);
  }
  cv_.notify_all();
  thread_.join();
  for (auto& [task, st] : dropped) {
    std::lock_guard lock(st->m);
    st->done = true;
    st->error = std::make_exception_ptr(PreconditionError("asynchzp: " + name_ + " stopped before this task ran"));
    st->cv.notify_all();
  }
}

Ticket CommThread::submit(std::function<void()> task) {
  Ticket t;
  t.state_ = std::make_shared<Ticket::State>();
  {
    std::lock_guard lock(m_);
    queue_.emplace_back(std::move(task), t.state_);
  }
  cv_.notify_one();
  return t;
}

void CommThread::run() {
  // CUDA's current device is the thread's own: the lane's device, before anything is enqueued on it.
  try {
    make_device_current(lane_.device());
  } catch (...) {
    failed_ = std::current_exception();
  }
  for (;;) {
    std::function<void()> task;
    std::shared_ptr<Ticket::State> st;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front().first);
      st = std::move(queue_.front().second);
      queue_.pop_front();
    }
    // After a failure nothing more is communicated: the first error answers every later ticket.
    std::exception_ptr err = failed_;
    std::unique_ptr<Event> enqueued;
    if (!err) {
      try {
        task();
        // What the task enqueued on the lane, for the compute stream to wait on where it uses the result.
        if (lane_.device().is_cuda()) {
          enqueued = std::make_unique<Event>(lane_.device());
          enqueued->record(lane_);
        }
      } catch (...) {
        err = std::current_exception();
        failed_ = err;
      }
    }
    task = nullptr;  // captured buffers (ring slots) are released before the ticket completes
    std::lock_guard lock(st->m);
    st->done = true;
    st->error = err;
    st->enqueued = std::move(enqueued);
    st->cv.notify_all();
  }
}

// --- RingFence / Block -----------------------------------------------------------------------------------

void RingFence::record(StreamRef s) {
  if (s.device().is_cpu()) return;
  std::lock_guard lock(m_);
  event_.record(s);
}

bool RingFence::wait(StreamRef s) {
  if (s.device().is_cpu()) return false;
  std::lock_guard lock(m_);
  event_.wait(s);
  return true;
}

void Block::reset() noexcept {
  if (slot_ && fence_ != nullptr) {
    try {
      fence_->record(release_on_);
    } catch (...) {
      // A failed device: the step is failing anyway; the slot still goes back so the pool can be torn down.
    }
  }
  slot_.release();
  alloc_.reset();
  fence_ = nullptr;
}

// --- AsyncComm -------------------------------------------------------------------------------------------

AsyncComm::AsyncComm(const Setup& s) : s_(s) {
  const workloads::ParamLayout& layout = *s.layout;
  const RingSizing rings = size_rings(layout, *s.seg, s.param_dtype, s.prefetch, s.pool_mb);
  shared_ = rings.shared;
  pool_ = std::make_unique<RingPool>(*s.alloc, std::vector<RingSpec>{{"all_gather", rings.all_gather},
                                                                    {"all_gather.shared", rings.all_gather_shared},
                                                                    {"reduce_scatter", rings.reduce_scatter},
                                                                    {"reduce_scatter.shared", rings.reduce_scatter_shared}},
                                     RingPoolOptions{.alignment = kRingAlign});
  ag_ring_ = pool_->ring_id("all_gather");
  ag_shared_ring_ = pool_->ring_id("all_gather.shared");
  rs_ring_ = pool_->ring_id("reduce_scatter");
  rs_shared_ring_ = pool_->ring_id("reduce_scatter.shared");
  deadline_ = 5 * RingPoolOptions{}.default_timeout;
  // Also checked by the plan before the run starts (hzpbench validate); kept here for direct users.
  if (s.fallback == SchedulerOptions::PoolFallback::error)
    check_rings_fit(rings, layout, *s.seg, s.param_dtype, s.pool_mb, s.prefetch);

  z3_ = s.z3->duplicate("z3");
  z2_ = s.z2->duplicate("z2");
  const Device dev = s.compute.device();
  ag_fence_ = std::make_unique<RingFence>(dev);
  rs_fence_ = std::make_unique<RingFence>(dev);
  param_lane_ = Stream(dev);
  grad_lane_ = Stream(dev);
  param_scratch_ = std::make_unique<StreamScratch>(param_lane_.ref());
  grad_scratch_ = std::make_unique<StreamScratch>(grad_lane_.ref());
  gather_ = std::make_unique<GatherScatter>(*z3_, s.seg->l3, *s.alloc, param_lane_.ref());
  rs_ = std::make_unique<GatherScatter>(*z2_, s.seg->l2, *s.alloc, grad_lane_.ref());
  gather_->set_scratch_keeper(param_scratch_.get());
  rs_->set_scratch_keeper(grad_scratch_.get());
  gather_inline_ = std::make_unique<GatherScatter>(*s.z3, s.seg->l3, *s.alloc, s.compute);
  rs_inline_ = std::make_unique<GatherScatter>(*s.z2, s.seg->l2, *s.alloc, s.compute);
  param_thread_ = std::make_unique<CommThread>("parameter thread", param_lane_.ref());
  grad_thread_ = std::make_unique<CommThread>("gradient thread", grad_lane_.ref());
}

AsyncComm::~AsyncComm() {
  // Threads first (dropping what has not started), then the blocks they filled, then the pool.
  param_thread_.reset();
  grad_thread_.reset();
  gathers_.clear();
  scatters_.clear();
}

bool AsyncComm::fits(RingId ring, std::size_t bytes) const {
  return RingSizing::fits(bytes, pool_->ring_capacity(ring), ring == ag_shared_ring_ || ring == rs_shared_ring_);
}

AsyncHzpStats AsyncComm::stats() const {
  std::lock_guard lock(stats_m_);
  return stats_;
}

std::vector<GatherEntry> gather_plan(const workloads::ParamLayout& layout, const std::vector<Action>& actions,
                                     bool reuse) {
  std::vector<GatherEntry> plan;
  StageReuse stage(layout, actions, reuse, false);
  std::vector<std::pair<int, int>> open(static_cast<std::size_t>(layout.num_units()), {-1, -1});  // gather, action
  for_each_unit_call(actions, [&](const Action& a, int u) {
    const int action = stage.index_of(a);
    const FirstUseGathers::Call c = stage.call(a, u);
    for (int b : c.gather) {
      open[static_cast<std::size_t>(b)] = {static_cast<int>(plan.size()), action};
      plan.push_back({b, false});
    }
    for (int b : c.release) {
      const auto [g, at] = open[static_cast<std::size_t>(b)];
      if (g >= 0 && at != action) plan[static_cast<std::size_t>(g)].held = true;
    }
  });
  return plan;
}

std::vector<int> gather_order(const workloads::ParamLayout& layout, const std::vector<Action>& actions, bool reuse) {
  std::vector<int> order;
  for (const GatherEntry& e : gather_plan(layout, actions, reuse)) order.push_back(e.block);
  return order;
}

void AsyncComm::begin_step(const std::vector<Action>& actions, bool reuse, TensorView params, TensorView grads,
                           std::function<void(int)> refresh) {
  HZP_CHECK(gathers_.empty() && scatters_.empty() && !refresh_,
            "asynchzp: a step began with collectives of the last one queued");
  refresh_ = std::move(refresh);
  refreshes_.assign(shared_.size(), Ticket{});
  params_ = params;
  grads_ = grads;
  order_.clear();
  held_.clear();
  for (const GatherEntry& e : gather_plan(*s_.layout, actions, reuse)) {
    order_.push_back(e.block);
    held_.push_back(e.held);
  }
  next_queue_ = next_consume_ = 0;
  waits_.clear();
  const std::size_t total = order_.size();
  {
    std::lock_guard lock(stats_m_);
    stats_.gather_issued_s.assign(total, 0.0);
    stats_.gather_wanted_s.assign(total, 0.0);
    stats_.gather_wait_s = stats_.scatter_wait_s = 0;
  }
  // The refreshes and gathers read the shards the last update wrote on the compute stream.
  lanes_after_compute();
  for (int u : order_) queue_refresh(u);  // all now, first use first (a unit gathered twice is queued once)
  while (next_queue_ < std::min<std::size_t>(total, static_cast<std::size_t>(s_.prefetch))) queue_gather(next_queue_++);
}

void AsyncComm::lanes_after_compute() {
  if (s_.compute.device().is_cpu()) return;
  auto updated = std::make_shared<Event>(s_.compute.device());
  updated->record(s_.compute);
  param_thread_->submit([this, updated] { updated->wait(param_lane_.ref()); });
  grad_thread_->submit([this, updated] { updated->wait(grad_lane_.ref()); });
}

void AsyncComm::join_lane(StreamRef lane) {
  if (s_.compute.device().is_cpu()) return;
  Event done(lane.device());
  done.record(lane);
  compute_waits([&] { done.wait(s_.compute); });
}

void AsyncComm::compute_after_param_lane() { join_lane(param_lane_.ref()); }
void AsyncComm::compute_after_grad_lane() { join_lane(grad_lane_.ref()); }

void AsyncComm::complete_requests(std::function<void()> param_extra, std::function<void()> grad_extra) {
  if (s_.compute.device().is_cpu()) return;  // the host waits for every collective as it goes
  const Ticket p = param_thread_->submit([this, f = std::move(param_extra)] {
    gather_->complete();
    if (f) f();
    param_scratch_->collect();
  });
  const Ticket g = grad_thread_->submit([this, f = std::move(grad_extra)] {
    rs_->complete();
    if (f) f();
    grad_scratch_->collect();
  });
  // Not a background wait of the step (the stream has passed these collectives): no interval recorded.
  p.wait(deadline_, "the parameter thread's collectives");
  g.wait(deadline_, "the gradient thread's collectives");
  gather_inline_->complete();
  rs_inline_->complete();
}

void AsyncComm::queue_refresh(int unit) {
  if (!refresh_ || refreshes_[static_cast<std::size_t>(unit)].valid()) return;
  refreshes_[static_cast<std::size_t>(unit)] = grad_thread_->submit([f = refresh_, unit] { f(unit); });
}

void AsyncComm::finish_refresh() {
  if (!refresh_) return;
  for (int u = 0; u < static_cast<int>(refreshes_.size()); ++u) queue_refresh(u);
  for (const Ticket& t : refreshes_) wait(t, "the step-end parameter all-gather");
  refresh_ = nullptr;
  // The update after this writes the shards the refreshes (gradient lane) and the gathers (parameter lane) read.
  compute_after_grad_lane();
  compute_after_param_lane();
}

void AsyncComm::queue_gather(std::size_t k) {
  const int u = order_[k];
  queue_refresh(u);  // normally queued by begin_step already; the gather below waits for it
  const Ticket refreshed = refreshes_[static_cast<std::size_t>(u)];
  const std::size_t bytes = static_cast<std::size_t>(s_.seg->unit_block_numel(u)) * dtype_size(s_.param_dtype);
  const RingId ring = shared_[u] ? ag_shared_ring_ : ag_ring_;
  Pending p;
  p.unit = u;
  const bool held = held_[k];
  if (!held && !fits(ring, bytes)) {  // pool_fallback = inline (validated at construction): gathered when consumed
    gathers_.push_back(std::move(p));
    return;
  }
  p.block = std::make_shared<Block>();
  CachingAllocator* alloc = s_.alloc;
  const Segments* seg = s_.seg;
  const TensorView shard = params_;
  const DType t = s_.param_dtype;
  p.ticket = param_thread_->submit([this, u, k, ring, bytes, seg, shard, t, held, alloc, refreshed, blk = p.block] {
    // The shard takes the last update first: the refresh on the gradient thread (host), and its lane (device).
    refreshed.wait(deadline_, "the step-end parameter all-gather");
    (void)refreshed.order(param_lane_.ref());
    // A slot comes back when the compute thread has queued its last use; the lane waits until that use has run.
    *blk = held ? Block(alloc->allocate(bytes, AllocationTag::comm))
                : Block(pool_->acquire(ring, bytes), ag_fence_.get(), s_.compute);
    if (!held) ag_fence_->wait(param_lane_.ref());
    {
      std::lock_guard lock(stats_m_);
      stats_.gather_issued_s[k] = wall_seconds();
      ++stats_.gathers;
    }
    auto* base = static_cast<std::byte*>(blk->data());
    for (int sg = seg->first(u); sg < seg->end(u); ++sg) {
      const ConstTensorView piece(static_cast<const std::byte*>(shard.data()) +
                                      seg->l3.slice_offset(sg) * std::int64_t(dtype_size(t)),
                                  Shape{seg->l3.slice_numel(sg)}, t, shard.device());
      seg->gather_segment(*gather_, sg, piece, base, t);
    }
  });
  gathers_.push_back(std::move(p));
}

Block AsyncComm::next_gathered(int unit) {
  const std::size_t total = order_.size();
  HZP_CHECK(next_consume_ < total && !gathers_.empty() && gathers_.front().unit == unit,
            "asynchzp: the step asked for unit ", unit, " as gather ", next_consume_, " of ", total,
            ", which the gather schedule does not have there");
  {
    std::lock_guard lock(stats_m_);
    stats_.gather_wanted_s[next_consume_] = wall_seconds();
  }
  ++next_consume_;
  // Keep `prefetch` gathers queued beyond the one consumed now.
  while (next_queue_ < std::min(total, next_consume_ + static_cast<std::size_t>(s_.prefetch))) queue_gather(next_queue_++);
  Pending p = std::move(gathers_.front());
  gathers_.pop_front();
  if (!p.block) {
    wait(refreshes_[static_cast<std::size_t>(unit)], "the step-end parameter all-gather", /*use=*/true);
    Block b(s_.alloc->allocate(static_cast<std::size_t>(s_.seg->unit_block_numel(unit)) * dtype_size(s_.param_dtype),
                               AllocationTag::comm));
    for (int sg = s_.seg->first(unit); sg < s_.seg->end(unit); ++sg) {
      const ConstTensorView piece(static_cast<const std::byte*>(params_.data()) +
                                      s_.seg->l3.slice_offset(sg) * std::int64_t(dtype_size(s_.param_dtype)),
                                  Shape{s_.seg->l3.slice_numel(sg)}, s_.param_dtype, params_.device());
      s_.seg->gather_segment(*gather_inline_, sg, piece, static_cast<std::byte*>(b.data()), s_.param_dtype);
    }
    std::lock_guard lock(stats_m_);
    ++stats_.gather_fallbacks;
    return b;
  }
  const Stopwatch waited;
  wait(p.ticket, "a parameter all-gather", /*use=*/true);
  {
    std::lock_guard lock(stats_m_);
    stats_.gather_wait_s += waited.wall();
  }
  return std::move(*p.block);
}

template <typename F>
void AsyncComm::background_wait(F&& wait_for) {
  const double begin = wall_seconds();
  {
    const coll::CommWaitScope waiting;
    wait_for();
  }
  waits_.emplace_back(begin, wall_seconds());
}

Block AsyncComm::grad_block(int unit) {
  const std::int64_t n = s_.seg->unit_block_numel(unit), real = s_.layout->unit_numel(unit);
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  const RingId ring = shared_[unit] ? rs_shared_ring_ : rs_ring_;
  if (!fits(ring, bytes)) return Block(s_.seg->new_grad_block(unit, *s_.alloc, DType::f32, s_.compute));
  // The slot is released on the gradient lane once its reduce-scatter is queued: the compute stream writes it
  // only after that reduce-scatter has run.
  RingSlot slot = pool_->try_acquire(ring, bytes);
  if (!slot) {
    // No room until the gradient thread's queued reduce-scatters free a slot: the compute thread waits on
    // communication, as at a ticket, so it is a background wait of the step (exposed), not bookkeeping.
    background_wait([&] { slot = pool_->acquire(ring, bytes); });
  }
  Block b(std::move(slot), rs_fence_.get(), grad_lane_.ref());
  compute_waits([&] { rs_fence_->wait(s_.compute); });
  if (n > real) zero_bytes(b.data_as<float>() + real, static_cast<std::size_t>(n - real) * sizeof(float), s_.compute);
  return b;
}

void AsyncComm::reduce_scatter(int unit, Block block, bool accumulate) {
  const Segments* seg = s_.seg;
  const TensorView grads = grads_;
  // The shard's dtype is the block's: fp32, or int64 fixed point in deterministic mode.
  auto scatter = [seg, grads, unit, accumulate, this](GatherScatter& gs, const Block& b) {
    const std::size_t e = dtype_size(grads.dtype());
    for (int sg = seg->first(unit); sg < seg->end(unit); ++sg) {
      const TensorView out(static_cast<std::byte*>(grads.data()) + seg->l2.slice_offset(sg) * std::int64_t(e),
                           Shape{seg->l2.slice_numel(sg)}, grads.dtype(), grads.device());
      seg->reduce_scatter_segment(gs, sg, b.data(), out, accumulate, *s_.alloc);
    }
  };
  const std::size_t bytes = static_cast<std::size_t>(seg->unit_block_numel(unit)) * sizeof(float);
  if (!fits(shared_[unit] ? rs_shared_ring_ : rs_ring_, bytes)) {
    scatter(*rs_inline_, block);
    std::lock_guard lock(stats_m_);
    ++stats_.scatter_fallbacks;
    return;
  }
  auto blk = std::make_shared<Block>(std::move(block));
  // The gradient is final once the backward queued so far has run: the one event the compute stream records
  // when a collective is issued (it never waits here).
  std::shared_ptr<Event> final_grad;
  if (s_.compute.device().is_cuda()) {
    final_grad = std::make_shared<Event>(s_.compute.device());
    final_grad->record(s_.compute);
  }
  scatters_.push_back(grad_thread_->submit([this, scatter, blk, final_grad] {
    if (final_grad) final_grad->wait(grad_lane_.ref());
    scatter(*rs_, *blk);
    blk->reset();  // gradient memory back to the ring as soon as the reduce-scatter is done
    std::lock_guard lock(stats_m_);
    ++stats_.scatters;
  }));
}

void AsyncComm::wait(const Ticket& t, const char* what, bool use) {
  background_wait([&] { t.wait(deadline_, what); });
  if (!use || s_.compute.device().is_cpu()) return;
  compute_waits([&] { (void)t.order(s_.compute); });
}

void AsyncComm::finish_reduce_scatters() {
  const Stopwatch waited;
  std::vector<Ticket> pending;
  pending.swap(scatters_);
  for (const Ticket& t : pending) wait(t, "a gradient reduce-scatter");
  std::lock_guard lock(stats_m_);
  stats_.scatter_wait_s += waited.wall();
}

}  // namespace hzp::schedulers
