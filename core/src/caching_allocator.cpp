// CachingAllocator implementation: blocks linked to their segment neighbours, two best-fit free
// sets ordered by (size, address), one map from live pointers to blocks, counters for the
// statistics.
#include "hzp/core/caching_allocator.hpp"

#include <cstdio>
#include <functional>
#include <limits>
#include <memory_resource>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace hzp {
namespace {

// A contiguous piece of one segment. Neighbours within the segment are linked so that a free can
// merge with them in O(1); a block with neither neighbour is a whole segment.
struct Block {
  std::byte* ptr = nullptr;
  std::size_t size = 0;       // block bytes: the rounded request plus any unsplit tail
  std::size_t requested = 0;  // bytes the caller asked for (live blocks only)
  Block* prev = nullptr;
  Block* next = nullptr;
  bool allocated = false;
  bool small = false;  // which pool the block and its segment belong to
  AllocationTag tag = AllocationTag::other;
};

// Best fit: the smallest block that fits, lowest address among equals (deterministic addresses).
struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const noexcept {
    if (a->size != b->size) return a->size < b->size;
    return std::less<const std::byte*>{}(a->ptr, b->ptr);
  }
};

}  // namespace

// One mutex guards everything. Allocations happen a few hundred times per training step, each a few
// set operations long, so contention is negligible next to the work the memory serves; and a single
// allocation touches a pool, the live map and the counters together, which finer locks would have
// to order for no measurable gain (PyTorch also uses one lock per device). Backing calls run under
// the lock too: a cudaMalloc is slow, but doing it unlocked would let two threads reserve two
// segments for what one could serve.
struct CachingAllocator::State {
  using FreeSet = std::pmr::set<Block*, BySizeThenAddress>;

  mutable std::mutex mu;
  // Tree and hash nodes come from a pool, not from malloc on every call: it is only touched under
  // `mu`, so the unsynchronized pool is safe, and it keeps the allocator's own overhead flat.
  std::pmr::unsynchronized_pool_resource nodes;
  FreeSet small_free{&nodes};
  FreeSet large_free{&nodes};
  std::pmr::unordered_map<const void*, Block*> live{&nodes};
  std::vector<Block*> spare;  // recycled Block objects

  AllocatorStats s;  // counters; free_bytes and largest_free_block are filled at snapshot time

  FreeSet& pool(bool small) { return small ? small_free : large_free; }

  Block* new_block() {
    if (spare.empty()) return new Block;
    Block* b = spare.back();
    spare.pop_back();
    *b = Block{};
    return b;
  }
  void recycle(Block* b) { spare.push_back(b); }

  ~State() {
    for (Block* b : spare) delete b;
  }
};

// ---------------------------------------------------------------------------------------------------
// Allocation

Allocation::Allocation(Allocation&& other) noexcept
    : owner_(other.owner_), ptr_(other.ptr_), size_(other.size_), tag_(other.tag_) {
  other.owner_ = nullptr;
  other.ptr_ = nullptr;
  other.size_ = 0;
}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    ptr_ = other.ptr_;
    size_ = other.size_;
    tag_ = other.tag_;
    other.owner_ = nullptr;
    other.ptr_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void Allocation::reset() noexcept {
  if (ptr_ != nullptr && owner_ != nullptr) {
    try {
      owner_->free_raw(ptr_);
    } catch (const std::exception& e) {
      // Cannot happen for a pointer the allocator handed out; destructors never throw
      // (a throw there would terminate the program).
      std::fprintf(stderr, "hzp::Allocation: free failed: %s\n", e.what());
    }
  }
  owner_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

// ---------------------------------------------------------------------------------------------------
// Configuration

void CachingAllocatorConfig::validate() const {
  auto pow2 = [](std::size_t v) { return v != 0 && (v & (v - 1)) == 0; };
  if (!pow2(round_bytes))
    HZP_THROW(ConfigError, "allocator round_bytes=", round_bytes, " must be a power of two");
  if (small_request_max == 0 || small_request_max % round_bytes != 0)
    HZP_THROW(ConfigError, "allocator small_request_max=", small_request_max,
              " must be a positive multiple of round_bytes=", round_bytes);
  if (small_segment_bytes < small_request_max || small_segment_bytes % round_bytes != 0)
    HZP_THROW(ConfigError, "allocator small_segment_bytes=", small_segment_bytes,
              " must be a multiple of round_bytes=", round_bytes,
              " and at least small_request_max=", small_request_max);
  if (large_segment_round == 0 || large_segment_round % round_bytes != 0)
    HZP_THROW(ConfigError, "allocator large_segment_round=", large_segment_round,
              " must be a positive multiple of round_bytes=", round_bytes);
  if (medium_segment_bytes != 0 &&
      (medium_segment_bytes < medium_request_max || medium_segment_bytes % round_bytes != 0))
    HZP_THROW(ConfigError, "allocator medium_segment_bytes=", medium_segment_bytes,
              " must be 0 (off) or a multiple of round_bytes=", round_bytes,
              " of at least medium_request_max=", medium_request_max);
}

// ---------------------------------------------------------------------------------------------------
// CachingAllocator

CachingAllocator::CachingAllocator(MemoryBacking& backing, CachingAllocatorConfig config)
    : backing_(backing), config_(config), state_(std::make_unique<State>()) {
  config_.validate();
  // Blocks start at segment base + a multiple of round_bytes, so this keeps the backing's
  // alignment.
  HZP_CHECK(backing_.alignment() > 0 && config_.round_bytes % backing_.alignment() == 0,
            "round_bytes=", config_.round_bytes, " must be a multiple of backing '",
            backing_.name(), "' alignment ", backing_.alignment());
}

CachingAllocator::~CachingAllocator() {
  State& st = *state_;
  std::lock_guard lock(st.mu);
  if (!st.live.empty())
    std::fprintf(stderr,
                 "hzp::CachingAllocator: destroyed with %zu live allocations (%zu bytes); "
                 "releasing their memory anyway\n",
                 st.live.size(), st.s.allocated_bytes);
  // Every block is either live or in a free set; segment heads are the blocks without a prev.
  std::vector<Block*> all;
  all.reserve(st.live.size() + st.small_free.size() + st.large_free.size());
  for (auto& kv : st.live) all.push_back(kv.second);
  all.insert(all.end(), st.small_free.begin(), st.small_free.end());
  all.insert(all.end(), st.large_free.begin(), st.large_free.end());
  for (Block* b : all) {
    if (b->prev != nullptr) continue;
    std::size_t seg = 0;
    for (Block* x = b; x != nullptr; x = x->next) seg += x->size;
    backing_.deallocate(b->ptr, seg);
  }
  for (Block* b : all) delete b;
}

Device CachingAllocator::device() const noexcept { return backing_.device(); }

std::size_t CachingAllocator::rounded_size(std::size_t bytes) const noexcept {
  return bytes == 0 ? config_.round_bytes : round_up(bytes, config_.round_bytes);
}

std::size_t CachingAllocator::segment_size_for(std::size_t bytes) const noexcept {
  const std::size_t size = rounded_size(bytes);
  if (size <= config_.small_request_max) return config_.small_segment_bytes;
  if (config_.medium_segment_bytes != 0 && size < config_.medium_request_max)
    return config_.medium_segment_bytes;
  return round_up(size, config_.large_segment_round);
}

Allocation CachingAllocator::allocate(std::size_t bytes, AllocationTag tag) {
  void* p = allocate_raw(bytes, tag);
  if (p == nullptr) return Allocation();
  return Allocation(this, p, bytes, tag);
}

namespace {

// Releases every fully free segment of one pool; returns the bytes released.
std::size_t release_free_segments(std::pmr::set<Block*, BySizeThenAddress>& pool,
                                  MemoryBacking& backing, AllocatorStats& s,
                                  std::vector<Block*>& spare) {
  std::size_t released = 0;
  for (auto it = pool.begin(); it != pool.end();) {
    Block* b = *it;
    if (b->prev == nullptr && b->next == nullptr) {
      backing.deallocate(b->ptr, b->size);
      released += b->size;
      s.reserved_bytes -= b->size;
      --s.num_segments;
      ++s.num_backing_frees;
      it = pool.erase(it);
      spare.push_back(b);
    } else {
      ++it;
    }
  }
  return released;
}

}  // namespace

void* CachingAllocator::allocate_raw(std::size_t bytes, AllocationTag tag) {
  if (bytes == 0) return nullptr;
  State& st = *state_;
  AllocatorStats& s = st.s;
  // Guards the rounding arithmetic against wrap-around; no backing could serve such a request
  // anyway.
  constexpr std::size_t kMaxRequest = std::numeric_limits<std::size_t>::max() / 4;

  std::lock_guard lock(st.mu);
  auto oom = [&](const char* reason, std::size_t segment) {
    ++s.num_ooms;
    std::size_t largest = 0;
    if (!st.small_free.empty()) largest = (*st.small_free.rbegin())->size;
    if (!st.large_free.empty()) largest = std::max(largest, (*st.large_free.rbegin())->size);
    HZP_THROW(OutOfMemoryError, "out of memory on ", to_string(backing_.device()), " (",
              backing_.name(), " backing): ", reason, "; requested ", format_bytes(bytes), " [tag ",
              allocation_tag_name(tag), "] needing a new segment of ", format_bytes(segment),
              "; allocated ", format_bytes(s.allocated_bytes), ", reserved ",
              format_bytes(s.reserved_bytes), ", limit ",
              config_.reserved_limit != 0 ? format_bytes(config_.reserved_limit) : "none",
              ", largest free block ", format_bytes(largest),
              ". Free or shrink buffers, or raise the limit");
  };
  if (bytes > kMaxRequest) oom("request too large", bytes);

  const std::size_t size = rounded_size(bytes);
  const bool small = size <= config_.small_request_max;
  auto& pool = st.pool(small);

  Block key;
  key.size = size;  // ptr = nullptr sorts first among equal sizes, so lower_bound is the best fit
  Block* b = nullptr;
  if (auto it = pool.lower_bound(&key); it != pool.end()) {
    b = *it;
    pool.erase(it);
  } else {
    const std::size_t segment = segment_size_for(bytes);
    // A failed attempt first returns cached segments, then tries once more (counted as a retry):
    // the cache may hold enough memory in segments of the other pool or of the wrong shape.
    auto release_and_retry = [&]() {
      const std::size_t freed = release_free_segments(st.small_free, backing_, s, st.spare) +
                                release_free_segments(st.large_free, backing_, s, st.spare);
      if (freed > 0) ++s.num_alloc_retries;
      return freed > 0;
    };
    auto over_limit = [&] {
      return config_.reserved_limit != 0 && s.reserved_bytes + segment > config_.reserved_limit;
    };
    if (over_limit() && (!release_and_retry() || over_limit()))
      oom("the reserved-bytes limit would be exceeded", segment);
    void* p = backing_.allocate(segment);
    if (p == nullptr && release_and_retry()) p = backing_.allocate(segment);
    if (p == nullptr) oom("the backing has no memory left", segment);

    b = st.new_block();
    b->ptr = static_cast<std::byte*>(p);
    b->size = segment;
    b->small = small;
    s.reserved_bytes += segment;
    ++s.num_segments;
    ++s.num_backing_allocs;
    s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, s.reserved_bytes);
  }

  // Split off the tail when it can serve a later request of the same pool. In the large pool a tail
  // of at most small_request_max could only ever serve small requests, which never look there, so
  // it stays attached to the block (counted as allocated) instead of sitting in the cache forever.
  const std::size_t remainder = b->size - size;
  const bool split =
      small ? remainder >= config_.round_bytes : remainder > config_.small_request_max;
  if (split) {
    Block* r = st.new_block();
    r->ptr = b->ptr + size;
    r->size = remainder;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }

  b->allocated = true;
  b->requested = bytes;
  b->tag = tag;
  st.live.emplace(b->ptr, b);

  s.allocated_bytes += b->size;
  s.requested_bytes += bytes;
  ++s.num_allocs;
  s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  s.peak_requested_bytes = std::max(s.peak_requested_bytes, s.requested_bytes);
  TagStats& t = s.by_tag[tag_index(tag)];
  t.allocated_bytes += b->size;
  t.requested_bytes += bytes;
  ++t.live_allocations;
  t.peak_allocated_bytes = std::max(t.peak_allocated_bytes, t.allocated_bytes);
  t.peak_requested_bytes = std::max(t.peak_requested_bytes, t.requested_bytes);
  return b->ptr;
}

void CachingAllocator::free_raw(void* ptr) {
  if (ptr == nullptr) return;
  State& st = *state_;
  AllocatorStats& s = st.s;
  std::lock_guard lock(st.mu);
  auto it = st.live.find(ptr);
  HZP_CHECK(it != st.live.end(), "free of pointer ", ptr,
            " that is not a live allocation of this allocator (double free, or from elsewhere)");
  Block* b = it->second;
  st.live.erase(it);

  s.allocated_bytes -= b->size;
  s.requested_bytes -= b->requested;
  ++s.num_frees;
  TagStats& t = s.by_tag[tag_index(b->tag)];
  t.allocated_bytes -= b->size;
  t.requested_bytes -= b->requested;
  --t.live_allocations;
  b->allocated = false;
  b->requested = 0;

  // Coalesce with free neighbours. Each must leave the size-ordered set before its size changes.
  auto& pool = st.pool(b->small);
  if (Block* p = b->prev; p != nullptr && !p->allocated) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    st.recycle(b);
    b = p;
  }
  if (Block* n = b->next; n != nullptr && !n->allocated) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    st.recycle(n);
  }
  pool.insert(b);
}

std::size_t CachingAllocator::empty_cache() {
  State& st = *state_;
  std::lock_guard lock(st.mu);
  return release_free_segments(st.small_free, backing_, st.s, st.spare) +
         release_free_segments(st.large_free, backing_, st.s, st.spare);
}

AllocatorStats CachingAllocator::stats() const {
  const State& st = *state_;
  std::lock_guard lock(st.mu);
  AllocatorStats out = st.s;
  out.free_bytes = out.reserved_bytes - out.allocated_bytes;
  out.largest_free_block = 0;
  if (!st.small_free.empty()) out.largest_free_block = (*st.small_free.rbegin())->size;
  if (!st.large_free.empty())
    out.largest_free_block = std::max(out.largest_free_block, (*st.large_free.rbegin())->size);
  return out;
}

void CachingAllocator::reset_peaks() {
  State& st = *state_;
  std::lock_guard lock(st.mu);
  AllocatorStats& s = st.s;
  s.peak_allocated_bytes = s.allocated_bytes;
  s.peak_requested_bytes = s.requested_bytes;
  s.peak_reserved_bytes = s.reserved_bytes;
  for (TagStats& t : s.by_tag) {
    t.peak_allocated_bytes = t.allocated_bytes;
    t.peak_requested_bytes = t.requested_bytes;
  }
}

}  // namespace hzp
