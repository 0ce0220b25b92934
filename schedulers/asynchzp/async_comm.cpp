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

CommThread::CommThread(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

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
    if (!err) {
      try {
        task();
      } catch (...) {
        err = std::current_exception();
        failed_ = err;
      }
    }
    task = nullptr;  // captured buffers (ring slots) are released before the ticket completes
    std::lock_guard lock(st->m);
    st->done = true;
    st->error = err;
    st->cv.notify_all();
  }
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
  gather_ = std::make_unique<GatherScatter>(*z3_, s.seg->l3, *s.alloc);
  rs_ = std::make_unique<GatherScatter>(*z2_, s.seg->l2, *s.alloc);
  gather_inline_ = std::make_unique<GatherScatter>(*s.z3, s.seg->l3, *s.alloc);
  rs_inline_ = std::make_unique<GatherScatter>(*s.z2, s.seg->l2, *s.alloc);
  param_thread_ = std::make_unique<CommThread>("parameter thread");
  grad_thread_ = std::make_unique<CommThread>("gradient thread");
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
  while (next_queue_ < std::min<std::size_t>(total, static_cast<std::size_t>(s_.prefetch))) queue_gather(next_queue_++);
}

void AsyncComm::queue_refresh(int unit) {
  if (!refresh_ || refreshes_[static_cast<std::size_t>(unit)].valid()) return;
  refreshes_[static_cast<std::size_t>(unit)] = param_thread_->submit([f = refresh_, unit] { f(unit); });
}

void AsyncComm::finish_refresh() {
  if (!refresh_) return;
  for (int u = 0; u < static_cast<int>(refreshes_.size()); ++u) queue_refresh(u);
  for (const Ticket& t : refreshes_) wait(t, "the step-end parameter all-gather");
  refresh_ = nullptr;
}

void AsyncComm::queue_gather(std::size_t k) {
  const int u = order_[k];
  queue_refresh(u);  // first use this step: the shard takes the last update first (same thread, in order)
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
  p.ticket = param_thread_->submit([this, u, k, ring, bytes, seg, shard, t, held, alloc, blk = p.block] {
    *blk = held ? Block(alloc->allocate(bytes, AllocationTag::comm)) : Block(pool_->acquire(ring, bytes));
    {
      std::lock_guard lock(stats_m_);
      stats_.gather_issued_s[k] = wall_seconds();
      ++stats_.gathers;
    }
    auto* base = static_cast<std::byte*>(blk->data());
    for (int sg = seg->first(u); sg < seg->end(u); ++sg) {
      const ConstTensorView piece(static_cast<const std::byte*>(shard.data()) +
                                      seg->l3.slice_offset(sg) * std::int64_t(dtype_size(t)),
                                  Shape{seg->l3.slice_numel(sg)}, t);
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
    wait(refreshes_[static_cast<std::size_t>(unit)], "the step-end parameter all-gather");
    Block b(s_.alloc->allocate(static_cast<std::size_t>(s_.seg->unit_block_numel(unit)) * dtype_size(s_.param_dtype),
                               AllocationTag::comm));
    for (int sg = s_.seg->first(unit); sg < s_.seg->end(unit); ++sg) {
      const ConstTensorView piece(static_cast<const std::byte*>(params_.data()) +
                                      s_.seg->l3.slice_offset(sg) * std::int64_t(dtype_size(s_.param_dtype)),
                                  Shape{s_.seg->l3.slice_numel(sg)}, s_.param_dtype);
      s_.seg->gather_segment(*gather_inline_, sg, piece, static_cast<std::byte*>(b.data()), s_.param_dtype);
    }
    std::lock_guard lock(stats_m_);
    ++stats_.gather_fallbacks;
    return b;
  }
  const Stopwatch waited;
  wait(p.ticket, "a parameter all-gather");
  {
    std::lock_guard lock(stats_m_);
    stats_.gather_wait_s += waited.wall();
  }
  return std::move(*p.block);
}

Block AsyncComm::grad_block(int unit) {
  const std::int64_t n = s_.seg->unit_block_numel(unit), real = s_.layout->unit_numel(unit);
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  const RingId ring = shared_[unit] ? rs_shared_ring_ : rs_ring_;
  if (!fits(ring, bytes)) return Block(s_.seg->new_grad_block(unit, *s_.alloc));
  Block b(pool_->acquire(ring, bytes));
  if (n > real) std::memset(b.data_as<float>() + real, 0, static_cast<std::size_t>(n - real) * sizeof(float));
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
                           Shape{seg->l2.slice_numel(sg)}, grads.dtype());
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
  scatters_.push_back(grad_thread_->submit([this, scatter, blk] {
    scatter(*rs_, *blk);
    blk->reset();  // gradient memory back to the ring as soon as the reduce-scatter is done
    std::lock_guard lock(stats_m_);
    ++stats_.scatters;
  }));
}

void AsyncComm::wait(const Ticket& t, const char* what) {
  const double begin = wall_seconds();
  // A wait on the background threads' collectives is a communication wait: a watchdog must not take this
  // rank, waiting for a stalled peer through them, for the one that stopped.
  const coll::CommWaitScope waiting;
  t.wait(deadline_, what);
  waits_.emplace_back(begin, wall_seconds());
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
