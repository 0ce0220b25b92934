// RingPool implementation: per ring, a head/tail pair over a contiguous range, a FIFO of slot
// records (released flag, span including wrap waste) and a condition variable that releases signal.
#include "hzp/core/ring_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/clock.hpp"

namespace hzp {
namespace {

struct Record {
  std::size_t span = 0;     // bytes this slot holds the ring for: wrap waste + aligned size
  std::size_t aligned = 0;  // aligned slot size
  std::size_t end = 0;      // ring offset just past the slot: the tail once it is reclaimed
  bool released = false;
};

struct Ring {
  std::byte* base = nullptr;
  // Occupied region runs from tail to head, cyclically; `used` tells a full ring from an empty one
  // when head == tail. Records are in acquisition order; seq of records.front() is front_seq.
  std::size_t head = 0;
  std::size_t tail = 0;
  std::size_t used = 0;
  std::deque<Record> records;
  std::uint64_t front_seq = 0;
  std::condition_variable room;  // notified when reclamation frees space
  RingStats st;
};

struct Placement {
  std::size_t offset = 0;
  std::size_t waste = 0;
};

// Where a slot of `aligned` bytes would go now, if anywhere. A slot never straddles the end: when
// the bytes left before the end are too few it goes to offset 0 and those bytes are skipped
// (waste).
std::optional<Placement> find_room(const Ring& r, std::size_t aligned) {
  const std::size_t cap = r.st.capacity_bytes;
  if (r.used == 0) return Placement{0, 0};
  if (r.head > r.tail) {  // occupied [tail, head): free at [head, cap) and [0, tail)
    if (cap - r.head >= aligned) return Placement{r.head, 0};
    if (r.tail >= aligned) return Placement{0, cap - r.head};
    return std::nullopt;
  }
  if (r.head == r.tail) return std::nullopt;  // used > 0: full
  // head < tail: occupied [tail, cap) and [0, head); free is [head, tail)
  if (r.tail - r.head >= aligned) return Placement{r.head, 0};
  return std::nullopt;
}

}  // namespace

// One mutex for the pool: a ring operation is a few integer updates, and stats() wants a consistent
// view of all rings. The condition variables are per ring so a release does not wake other rings'
// waiters.
struct RingPool::State {
  mutable std::mutex mu;
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<std::string> names;
  RingPoolOptions options;
  std::size_t total = 0;
  Device device;
  // Exactly one of these owns the region.
  MemoryBacking* backing = nullptr;
  void* backing_ptr = nullptr;
  Allocation from_allocator;

  Ring& ring(RingId id) {
    HZP_CHECK(id.index < rings.size(), "ring id ", id.index, " out of range (", rings.size(),
              " rings)");
    return *rings[id.index];
  }
};

// ---------------------------------------------------------------------------------------------------
// RingSlot

RingSlot::RingSlot(RingSlot&& o) noexcept
    : pool_(o.pool_),
      ring_(o.ring_),
      seq_(o.seq_),
      ptr_(o.ptr_),
      size_(o.size_),
      offset_(o.offset_) {
  o.pool_ = nullptr;
  o.ptr_ = nullptr;
  o.size_ = 0;
}

RingSlot& RingSlot::operator=(RingSlot&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    ring_ = o.ring_;
    seq_ = o.seq_;
    ptr_ = o.ptr_;
    size_ = o.size_;
    offset_ = o.offset_;
    o.pool_ = nullptr;
    o.ptr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void RingSlot::release() noexcept {
  if (pool_ != nullptr && ptr_ != nullptr) pool_->release(ring_, seq_);
  pool_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

// ---------------------------------------------------------------------------------------------------
// RingPool

namespace {

// Validates the specs and the options; returns the aligned capacities.
std::vector<std::size_t> plan_rings(const std::vector<RingSpec>& rings, const RingPoolOptions& o,
                                    std::size_t source_alignment) {
  const std::size_t a = o.alignment;
  HZP_CHECK(a != 0 && (a & (a - 1)) == 0, "ring pool alignment ", a, " must be a power of two");
  HZP_CHECK(source_alignment % a == 0, "ring pool alignment ", a,
            " must divide the memory source's alignment ", source_alignment);
  HZP_CHECK(o.default_timeout.count() > 0, "ring pool default timeout must be positive");
  HZP_CHECK(!rings.empty(), "a ring pool needs at least one ring");
  std::vector<std::size_t> caps;
  for (std::size_t i = 0; i < rings.size(); ++i) {
    HZP_CHECK(!rings[i].name.empty(), "ring ", i, " has no name");
    HZP_CHECK(rings[i].capacity_bytes > 0, "ring '", rings[i].name, "' has zero capacity");
    for (std::size_t j = 0; j < i; ++j)
      HZP_CHECK(rings[j].name != rings[i].name, "ring name '", rings[i].name, "' appears twice");
    caps.push_back(round_up(rings[i].capacity_bytes, a));
  }
  return caps;
}

void carve(std::vector<std::unique_ptr<Ring>>& out, std::vector<std::string>& names,
           const std::vector<RingSpec>& rings, const std::vector<std::size_t>& caps, void* region) {
  std::byte* p = static_cast<std::byte*>(region);
  for (std::size_t i = 0; i < rings.size(); ++i) {
    auto r = std::make_unique<Ring>();
    r->base = p;
    r->st.name = rings[i].name;
    r->st.capacity_bytes = caps[i];
    names.push_back(rings[i].name);
    out.push_back(std::move(r));
    p += caps[i];
  }
}

std::size_t sum(const std::vector<std::size_t>& v) {
  std::size_t t = 0;
  for (std::size_t x : v) t += x;
  return t;
}

}  // namespace

RingPool::RingPool(MemoryBacking& backing, std::vector<RingSpec> rings, RingPoolOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  const auto caps = plan_rings(rings, options, backing.alignment());
  s.options = options;
  s.total = sum(caps);
  s.device = backing.device();
  s.backing_ptr = backing.allocate(s.total);
  if (s.backing_ptr == nullptr)
    HZP_THROW(OutOfMemoryError, "ring pool: backing '", backing.name(), "' on ",
              to_string(backing.device()), " cannot provide ", format_bytes(s.total), " for ",
              rings.size(), " rings");
  s.backing = &backing;
  carve(s.rings, s.names, rings, caps, s.backing_ptr);
}

RingPool::RingPool(CachingAllocator& allocator, std::vector<RingSpec> rings,
                   RingPoolOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  const auto caps = plan_rings(rings, options, allocator.backing().alignment());
  s.options = options;
  s.total = sum(caps);
  s.device = allocator.device();
  s.from_allocator = allocator.allocate(s.total, AllocationTag::comm);
  carve(s.rings, s.names, rings, caps, s.from_allocator.data());
}

RingPool::~RingPool() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    for (const auto& r : s.rings)
      if (r->st.live_slots != 0)
        std::fprintf(stderr, "hzp::RingPool: destroyed while ring '%s' has %zu live slots\n",
                     r->st.name.c_str(), r->st.live_slots);
  }
  if (s.backing != nullptr) s.backing->deallocate(s.backing_ptr, s.total);
  // from_allocator frees itself with the state.
}

RingId RingPool::ring_id(std::string_view name) const {
  const State& s = *state_;
  for (std::size_t i = 0; i < s.names.size(); ++i)
    if (s.names[i] == name) return RingId{static_cast<std::uint32_t>(i)};
  std::string known;
  for (const auto& n : s.names) known += (known.empty() ? "" : ", ") + n;
  HZP_THROW(PreconditionError, "ring pool has no ring named '", name, "' (rings: ", known, ")");
}

std::size_t RingPool::num_rings() const noexcept { return state_->rings.size(); }
const std::string& RingPool::ring_name(RingId ring) const { return state_->ring(ring).st.name; }
std::size_t RingPool::ring_capacity(RingId ring) const {
  return state_->ring(ring).st.capacity_bytes;
}
std::size_t RingPool::reserved_bytes() const noexcept { return state_->total; }
Device RingPool::device() const noexcept { return state_->device; }
std::size_t RingPool::alignment() const noexcept { return state_->options.alignment; }

RingSlot RingPool::acquire(RingId ring, std::size_t bytes, std::chrono::nanoseconds timeout) {
  return acquire_impl(ring, bytes, true, timeout);
}
RingSlot RingPool::acquire(RingId ring, std::size_t bytes) {
  return acquire_impl(ring, bytes, true, state_->options.default_timeout);
}
RingSlot RingPool::try_acquire(RingId ring, std::size_t bytes) {
  return acquire_impl(ring, bytes, false, {});
}

RingSlot RingPool::acquire_impl(RingId id, std::size_t bytes, bool wait,
                                std::chrono::nanoseconds timeout) {
  State& s = *state_;
  // "Forever" is a year: steady_clock's time_point would overflow on nanoseconds::max().
  timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::hours(24 * 365));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(s.mu);
  Ring& r = s.ring(id);
  HZP_CHECK(bytes > 0, "zero-byte acquire from ring '", r.st.name, "'");
  const std::size_t aligned = round_up(bytes, s.options.alignment);
  if (aligned > r.st.capacity_bytes)
    HZP_THROW(PreconditionError, "ring '", r.st.name, "': a slot of ", format_bytes(bytes), " (",
              aligned, " B aligned) can never fit its capacity of ",
              format_bytes(r.st.capacity_bytes), "; enlarge the ring or split the operation");

  std::optional<Placement> where = find_room(r, aligned);
  if (!where) {
    if (!wait) {
      ++r.st.failed_try_acquires;
      return RingSlot();
    }
    ++r.st.stalls;
    ++r.st.waiters;
    const double t0 = wall_seconds();
    const bool ok = r.room.wait_until(lock, deadline, [&] {
      where = find_room(r, aligned);
      return where.has_value();
    });
    --r.st.waiters;
    r.st.stall_seconds += wall_seconds() - t0;
    if (!ok) {
      ++r.st.timeouts;
      HZP_THROW(TimeoutError, "ring '", r.st.name, "': no room for a slot of ", format_bytes(bytes),
                " after waiting ", std::chrono::duration<double>(timeout).count(), " s; capacity ",
                format_bytes(r.st.capacity_bytes), ", in use ", format_bytes(r.used), " (",
                r.st.live_slots, " live slots, ", format_bytes(r.st.live_bytes),
                "); is a slot never released?");
    }
  }

  Record rec;
  rec.aligned = aligned;
  rec.span = where->waste + aligned;
  rec.end = where->offset + aligned;
  if (where->offset == 0 && r.used != 0) {
    ++r.st.wraps;
    r.st.wrap_waste_bytes += where->waste;
  }
  r.records.push_back(rec);
  const std::uint64_t seq = r.front_seq + r.records.size() - 1;
  r.head = rec.end;
  r.used += rec.span;

  ++r.st.acquires;
  ++r.st.live_slots;
  r.st.live_bytes += aligned;
  r.st.in_use_bytes = r.used;
  r.st.peak_in_use_bytes = std::max(r.st.peak_in_use_bytes, r.used);
  return RingSlot(this, id, seq, r.base + where->offset, bytes, where->offset);
}

void RingPool::release(RingId id, std::uint64_t seq) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  Ring& r = *s.rings[id.index];
  Record& rec = r.records[seq - r.front_seq];
  rec.released = true;
  --r.st.live_slots;
  r.st.live_bytes -= rec.aligned;

  // Reclaim in FIFO order: space behind an older live slot stays occupied until that one goes too.
  bool reclaimed = false;
  while (!r.records.empty() && r.records.front().released) {
    const Record& f = r.records.front();
    r.tail = f.end;
    r.used -= f.span;
    r.records.pop_front();
    ++r.front_seq;
    reclaimed = true;
  }
  if (r.records.empty()) r.head = r.tail = 0;  // restart at the base: no waste for the next lap
  r.st.in_use_bytes = r.used;
  if (reclaimed) r.room.notify_all();
}

RingStats RingPool::stats(RingId ring) const {
  std::lock_guard lock(state_->mu);
  return state_->ring(ring).st;
}

std::vector<RingStats> RingPool::stats() const {
  std::lock_guard lock(state_->mu);
  std::vector<RingStats> out;
  for (const auto& r : state_->rings) out.push_back(r->st);
  return out;
}

void RingPool::reset_peaks() {
  std::lock_guard lock(state_->mu);
  for (auto& r : state_->rings) r->st.peak_in_use_bytes = r->used;
}

}  // namespace hzp
