// The bytes of a shared-memory transport segment, as every process of a machine sees them: header
// pages, then for each ordered pair (from, to) of the communicator's ranks on the machine a ring of
// `slots` slots, each a 64-byte slot header followed by `slot_bytes` of data. Process-shared: only
// trivially copyable fields, the sequence number touched through std::atomic_ref.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shared_buffer_registry.hpp"

namespace hzp::coll::detail {

/// One slot's header, on its own cache line. `seq` is the slot's state for chunk c (chunks are
/// numbered per ring from 0): 2c+1 = full with chunk c (producer, release); 2c+2 = chunk c consumed
/// (consumer, release). A new segment is all zeros, which reads "free" for chunks 0..slots-1. The
/// other fields are plain: written by the producer before its release store, read by the consumer
/// after its acquire load, so they need no atomics of their own.
struct alignas(64) SlotHeader {
  std::uint64_t seq;
  std::int32_t tag;
  std::uint32_t first;      // kFirst on a message's first chunk (a consistency check), | kDirect for a descriptor
  std::uint64_t msg_bytes;  // the whole message
  std::uint64_t offset;     // of this chunk in the message
  std::uint64_t len;        // bytes of data in this slot (0 for an empty message)
  double join;              // the timing header (comm_state.hpp Header), carried by every chunk
  double ready;

  std::byte* data() noexcept { return reinterpret_cast<std::byte*>(this + 1); }

  static constexpr std::uint32_t kFirst = 1;
  /// A single-copy message: the slot holds a DirectDescriptor instead of data (len = 0, msg_bytes = the whole
  /// message). The consumer reads the bytes from the producer's memory and marks the slot consumed only once it
  /// has all of them; that release is the producer's signal that its buffer is free again.
  static constexpr std::uint32_t kDirect = 2;
  /// With kDirect: the message lies in a SharedBuffer of the producer (DirectDescriptor::shared), which the
  /// consumer maps and reads with plain loads instead of process_vm_readv.
  static constexpr std::uint32_t kMapped = 4;
};

/// Where a single-copy message's bytes are: the producer's process and the address in it, and for a mapped
/// message the shared buffer that holds them.
struct DirectDescriptor {
  std::int64_t pid;
  std::uint64_t address;
  SharedRange shared;
};
static_assert(sizeof(SlotHeader) == 64, "a slot header is one cache line");
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free,
              "slot sequence numbers are shared between processes: they must be lock-free");

struct SegmentHeader {
  static constexpr std::uint64_t kMagic = 0x687a702d73686d31ull;  // "hzp-shm1"
  std::uint64_t magic;
  std::uint64_t id;  // the communicator's channel id
  std::uint32_t ranks;
  std::uint32_t slots;
  std::uint64_t slot_bytes;
  /// Per machine-local rank, written by that rank at setup: where its probe word is (and its probe page of shared
  /// memory), so that every peer can try a cross-memory read (a mapping) before single-copy (mapped) messages are
  /// used (ShmTransport::create).
  static constexpr int kMaxProbes = 256;
  DirectDescriptor probe[kMaxProbes];
};


struct ShmLayout {
  static constexpr std::size_t kHeaderBytes = 16384;  // whole pages: the rings stay page-aligned
  int ranks = 0;  // the communicator's ranks on this machine
  int slots = 4;
  std::size_t slot_bytes = 0;  // a multiple of 4096

  std::size_t slot_stride() const noexcept { return sizeof(SlotHeader) + slot_bytes; }
  std::size_t ring_bytes() const noexcept { return static_cast<std::size_t>(slots) * slot_stride(); }
  // ranks x ranks rings (the diagonal unused: simpler indexing, never touched, so never backed).
  std::size_t total_bytes() const noexcept {
    return kHeaderBytes + static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks) * ring_bytes();
  }
};

static_assert(sizeof(SegmentHeader) <= ShmLayout::kHeaderBytes, "the segment header fits its pages");

/// One process's mapping of its machine's segment. The name exists only during setup.
class ShmSegment {
 public:
  /// create: O_EXCL, sized and stamped (the group's lowest rank on the machine); else opened and
  /// checked against id and layout. Null with `error` set on failure (nothing left behind).
  static std::unique_ptr<ShmSegment> map(const std::string& name, const ShmLayout& layout, std::uint64_t id,
                                         bool create, std::string& error);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void unlink() noexcept;
  /// First slot of the ring from machine-local rank `from` to `to`.
  SlotHeader* ring(int from, int to) const noexcept;
  SegmentHeader* header() const noexcept { return reinterpret_cast<SegmentHeader*>(base_); }
  const ShmLayout& layout() const noexcept { return layout_; }

 private:
  ShmSegment() = default;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  ShmLayout layout_;
  std::string name_;
};

}  // namespace hzp::coll::detail
