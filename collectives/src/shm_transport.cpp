// The shared-memory transport's data path: per peer an outgoing and an incoming ring of slots (see
// shm_layout.hpp for the slot protocol), a queue of messages to send (written chunk by chunk, one
// message at a time, in posting order), receives matched by tag in posting order, and messages that
// arrive before their receive kept aside in the process. pump() moves whatever can move, never waits.
// Single-copy messages (at least single_copy_bytes) travel as a descriptor in one slot; the receiver reads the
// sender's buffer with process_vm_readv, a piece per pump round, and releases the slot when it has all of it.
// Mapped messages (from a SharedBuffer) go the same way, read with plain loads from the receiver's mapping of the
// sender's buffer: copied, or reduced straight from the peer's pages with no staging.
// A descriptor send marked early (a kept send) ends once the descriptor is out: the ring goes on to the next
// message, and the sender checks the descriptor's slot (read_by_peer) before the bytes are written again.
#include "shm_transport.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hzp/collectives/shm_message_counts.hpp"
#include "hzp/core/error.hpp"
#include "shm_layout.hpp"

namespace hzp::coll {
namespace {

std::atomic<std::uint64_t> sent_slots{0}, sent_single_copy{0}, sent_mapped{0}, sent_ended_early{0};

}  // namespace

ShmMessageCounts shm_message_counts() noexcept {
  return {sent_slots.load(std::memory_order_relaxed), sent_single_copy.load(std::memory_order_relaxed),
          sent_mapped.load(std::memory_order_relaxed), sent_ended_early.load(std::memory_order_relaxed)};
}

}  // namespace hzp::coll

namespace hzp::coll::detail {
namespace {

std::uint64_t load_acquire(SlotHeader* h) noexcept {
  return std::atomic_ref<std::uint64_t>(h->seq).load(std::memory_order_acquire);
}
void store_release(SlotHeader* h, std::uint64_t v) noexcept {
  std::atomic_ref<std::uint64_t>(h->seq).store(v, std::memory_order_release);
}

}  // namespace

std::string read_process_memory(std::int64_t pid, std::uint64_t address, std::byte* into, std::size_t len) {
  while (len > 0) {
    iovec local{into, len};
    iovec remote{reinterpret_cast<void*>(address), len};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n <= 0) return std::string("process_vm_readv: ") + (n < 0 ? std::strerror(errno) : "no bytes read");
    into += n;
    address += static_cast<std::uint64_t>(n);
    len -= static_cast<std::size_t>(n);
  }
  return {};
}

ShmTransport::ShmTransport(std::unique_ptr<ShmSegment> segment, const CommState& st,
                           const std::vector<int>& machine_index, std::size_t single_copy_bytes, bool mapped)
    : segment_(std::move(segment)), comm_name_(st.name), rank_(st.rank), single_copy_bytes_(single_copy_bytes),
      mapped_(mapped) {
  const ShmLayout& layout = segment_->layout();
  slot_bytes_ = layout.slot_bytes;
  slot_stride_ = layout.slot_stride();
  slots_ = layout.slots;
  const int me = machine_index[static_cast<std::size_t>(st.rank)];
  local_of_.assign(static_cast<std::size_t>(st.size), -1);
  for (int q = 0; q < st.size; ++q) {
    const int i = machine_index[static_cast<std::size_t>(q)];
    if (i < 0 || q == st.rank) continue;
    local_of_[static_cast<std::size_t>(q)] = static_cast<int>(channels_.size());
    Channel& c = channels_.emplace_back();
    c.peer = q;
    c.out = segment_->ring(me, i);
    c.in = segment_->ring(i, me);
  }
}

ShmTransport::~ShmTransport() = default;

SlotHeader* ShmTransport::slot(SlotHeader* ring, std::uint64_t chunk) const noexcept {
  const std::size_t k = static_cast<std::size_t>(chunk % static_cast<std::uint64_t>(slots_));
  return reinterpret_cast<SlotHeader*>(reinterpret_cast<std::byte*>(ring) + k * slot_stride_);
}

void ShmTransport::check_usable() const {
  if (!poisoned_.empty())
    HZP_THROW(PreconditionError, "the shared-memory channels of communicator '", comm_name_,
              "' are unusable: ", poisoned_);
}

void ShmTransport::fail(const std::string& why) {
  if (poisoned_.empty()) poisoned_ = why;
  HZP_THROW(PreconditionError, "shared-memory transport of communicator '", comm_name_, "': ", why);
}

void ShmTransport::post(ShmSend& s) {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable();
  channel(s.peer).sends.push_back(&s);
}

void ShmTransport::post(ShmRecv& r) {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable();
  Channel& c = channel(r.peer);
  // Non-overtaking, as in MPI: the earliest message kept aside with this tag is this receive's. (A
  // posted receive and a kept-aside message never share a tag: whichever came second took the other.)
  for (auto it = c.unexpected.begin(); it != c.unexpected.end(); ++it) {
    if (it->tag == r.tag) {
      take_unexpected(c, r, it);
      return;
    }
  }
  c.posted.push_back(&r);
}

void ShmTransport::take_unexpected(Channel& c, ShmRecv& r, std::list<Unexpected>::iterator it) {
  Unexpected& u = *it;
  if (u.msg_bytes > r.capacity)
    fail("a message of " + std::to_string(u.msg_bytes) + " bytes from rank " + std::to_string(c.peer) +
         " (tag " + std::to_string(u.tag) + ") is longer than its receive of " + std::to_string(r.capacity));
  r.matched = true;
  r.msg_bytes = u.msg_bytes;
  r.header = u.header;
  if (u.got > 0) deliver(r, u.data.get(), 0, u.got);
  r.got = u.got;
  if (c.cur_unexpected == &u) {
    c.cur_unexpected = nullptr;
    c.cur_recv = &r;  // the rest of the message streams straight into the receive
  } else {
    r.done = true;  // kept aside whole
  }
  c.unexpected.erase(it);
}

void ShmTransport::deliver(ShmRecv& r, const std::byte* src, std::size_t offset, std::size_t len) {
  if (len == 0) return;
  if (!r.reduce) {
    std::memcpy(r.dst + offset, src, len);
    return;
  }
  // Chunks hold whole elements: slots are multiples of 4096 bytes and messages start on a slot.
  const std::size_t ea = dtype_size(r.a_type), eb = dtype_size(r.b_type);
  const std::size_t i0 = offset / ea, n = len / ea;
  if (r.finish)
    r.red.combine_finish(r.dst + i0 * r.red.elem(), src, r.a_type, r.b + i0 * eb, r.b_type, n);
  else
    r.red.combine(r.dst + i0 * r.red.acc_elem(), src, r.a_type, r.b + i0 * eb, r.b_type, n);
}

bool ShmTransport::send_one(Channel& c) {
  if (c.sends.empty()) return false;
  ShmSend& s = *c.sends.front();
  if (s.awaiting) {
    // Acquire pairs with the consumer's release after its last read of `src`: the buffer is the caller's again.
    // Nothing else is written to the ring meanwhile, so the slot still holds this value when we look.
    if (load_acquire(slot(c.out, s.ack_chunk)) != 2 * s.ack_chunk + 2) return false;
    s.awaiting = false;
    s.done = true;
    c.sends.pop_front();
    return true;
  }
  SlotHeader* h = slot(c.out, c.tx);
  const std::uint64_t k = static_cast<std::uint64_t>(slots_);
  const std::uint64_t free_seq = c.tx < k ? 0 : 2 * (c.tx - k) + 2;
  // Acquire pairs with the consumer's release of the slot's previous chunk: its reads of the slot
  // happen before the writes below.
  if (load_acquire(h) != free_seq) return false;
  if (mapped_ && s.bytes > 0) {
    if (const std::optional<SharedRange> shared = find_shared_range(s.src, s.bytes))
      return send_descriptor(c, s, h, &*shared);
  }
  if (single_copy_bytes_ > 0 && s.bytes >= single_copy_bytes_) return send_descriptor(c, s, h, nullptr);
  const std::size_t len = std::min(slot_bytes_, s.bytes - s.put);
  h->tag = s.tag;
  h->first = s.put == 0 ? SlotHeader::kFirst : 0;
  h->msg_bytes = s.bytes;
  h->offset = s.put;
  h->len = len;
  h->join = s.header.join;
  h->ready = s.header.ready;
  if (len > 0) {
    std::memcpy(h->data(), s.src + s.put, len);
    // The second write comes from the slot just written (cache-hot), not from the source again.
    if (s.copy_to != nullptr) std::memcpy(s.copy_to + s.put, h->data(), len);
  }
  // Release: the fields and data above are visible to the consumer once it acquires this value.
  store_release(h, 2 * c.tx + 1);
  ++c.tx;
  s.put += len;
  s.started = true;
  if (s.put == s.bytes) {
    s.done = true;
    c.sends.pop_front();
    sent_slots.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

bool ShmTransport::send_descriptor(Channel& c, ShmSend& s, SlotHeader* h, const SharedRange* shared) {
  // The sender's own copy (send_and_copy) is made here, from its buffer, while the receiver reads the same.
  if (s.copy_to != nullptr) std::memcpy(s.copy_to, s.src, s.bytes);
  h->tag = s.tag;
  h->first = SlotHeader::kFirst | SlotHeader::kDirect | (shared != nullptr ? SlotHeader::kMapped : 0);
  h->msg_bytes = s.bytes;
  h->offset = 0;
  h->len = 0;
  h->join = s.header.join;
  h->ready = s.header.ready;
  const DirectDescriptor d{static_cast<std::int64_t>(getpid()), reinterpret_cast<std::uint64_t>(s.src),
                           shared != nullptr ? *shared : SharedRange{}};
  std::memcpy(h->data(), &d, sizeof d);
  store_release(h, 2 * c.tx + 1);
  s.ack_chunk = c.tx++;
  s.put = s.bytes;
  s.started = true;
  (shared != nullptr ? sent_mapped : sent_single_copy).fetch_add(1, std::memory_order_relaxed);
  if (s.early) {
    // The ring moves on to the next message at once; the receiver still releases this slot only after its last
    // read, which is what read_by_peer looks for.
    s.unread = true;
    s.done = true;
    c.sends.pop_front();
    sent_ended_early.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  s.awaiting = true;  // done once the receiver releases the slot (send_one)
  return true;
}

bool ShmTransport::read_by_peer(int peer, std::uint64_t chunk) const {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable();
  // Acquire pairs with the consumer's release after its last read. A slot's sequence number only grows (the
  // producer refills it only after that release), so any later value also means chunk `chunk` was read.
  return load_acquire(slot(channel(peer).out, chunk)) >= 2 * chunk + 2;
}

void ShmTransport::abandon_unread(int peer, std::uint64_t chunk) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (load_acquire(slot(channel(peer).out, chunk)) >= 2 * chunk + 2 || !poisoned_.empty()) return;
  poisoned_ = "a kept message to rank " + std::to_string(peer) + " was abandoned before the peer had read it";
}

bool ShmTransport::read_direct(Channel& c, const SlotHeader& h) {
  // One ring's worth per call: pump() goes round the channels between pieces, so a large message does not
  // hold up the others (nor the opposite direction of an exchange).
  const std::size_t piece = slot_bytes_ * static_cast<std::size_t>(slots_);
  const std::size_t total = h.msg_bytes;
  std::size_t& got = c.cur_recv != nullptr ? c.cur_recv->got : c.cur_unexpected->got;
  const std::size_t len = std::min(piece, total - got);
  const bool reduce = c.cur_recv != nullptr && c.cur_recv->reduce;
  if (c.cur_mapped) {
    // Plain loads from the sender's pages: a reduction combines straight from them, a copy is one memcpy.
    SharedRange at = c.cur_range;
    at.offset += got;
    std::string error;
    const std::byte* src = peer_maps_.find(at, error);
    if (src == nullptr)
      fail("mapping the shared buffer of rank " + std::to_string(c.peer) + " (pid " + std::to_string(at.pid) +
           ") failed: " + error);
    if (c.cur_recv != nullptr)
      deliver(*c.cur_recv, src, got, len);  // pieces are whole pages: whole elements
    else
      std::memcpy(c.cur_unexpected->data.get() + got, src, len);
  } else {
    std::byte* into = nullptr;
    if (reduce) {
      staging_.resize(piece);
      into = staging_.data();
    } else {
      into = (c.cur_recv != nullptr ? c.cur_recv->dst : c.cur_unexpected->data.get()) + got;
    }
    const std::string error = read_process_memory(c.cur_pid, c.cur_address + got, into, len);
    if (!error.empty())
      fail("single-copy read of " + std::to_string(len) + " bytes from rank " + std::to_string(c.peer) + " (pid " +
           std::to_string(c.cur_pid) + ") failed: " + error);
    if (reduce) deliver(*c.cur_recv, staging_.data(), got, len);  // pieces hold whole elements (pages)
  }
  got += len;
  if (got < total) return false;
  if (c.cur_recv != nullptr) {
    c.cur_recv->done = true;
    c.cur_recv = nullptr;
  } else {
    c.cur_unexpected = nullptr;
  }
  c.cur_direct = false;
  return true;
}

bool ShmTransport::recv_one(Channel& c) {
  SlotHeader* h = slot(c.in, c.rx);
  // Acquire pairs with the producer's release: the slot's fields and data are complete.
  if (load_acquire(h) != 2 * c.rx + 1) return false;
  const std::size_t len = h->len, offset = h->offset, total = h->msg_bytes;
  if (c.cur_recv == nullptr && c.cur_unexpected == nullptr) {
    if ((h->first & SlotHeader::kFirst) == 0 || offset != 0)
      fail("ring from rank " + std::to_string(c.peer) + " is out of step (chunk " + std::to_string(c.rx) +
           " is not the start of a message)");
    const Header header{h->join, h->ready};
    const auto it = std::find_if(c.posted.begin(), c.posted.end(), [&](const ShmRecv* r) { return r->tag == h->tag; });
    if (it != c.posted.end()) {
      ShmRecv& r = **it;
      c.posted.erase(it);
      if (total > r.capacity)
        fail("a message of " + std::to_string(total) + " bytes from rank " + std::to_string(c.peer) + " (tag " +
             std::to_string(h->tag) + ") is longer than its receive of " + std::to_string(r.capacity));
      r.matched = true;
      r.msg_bytes = total;
      r.header = header;
      c.cur_recv = &r;
    } else {
      // No receive for it yet. While nothing else is expected from this peer it waits in the ring
      // (no extra copy; the sender stalls once the ring is full, as MPI's rendezvous would): in a
      // ring collective this is the next round's message, taken when that round posts. But a
      // receive that is posted may be for a message behind it (another call on this communicator,
      // or tags received out of order): then it is kept aside (MPI's unexpected message) so the
      // ring flows, and no receive ever waits behind a message nobody has asked for yet.
      if (c.posted.empty()) return false;
      Unexpected& u = c.unexpected.emplace_back();
      u.tag = h->tag;
      u.msg_bytes = total;
      u.header = header;
      u.data.reset(new std::byte[total]);
      c.cur_unexpected = &u;
    }
    if ((h->first & SlotHeader::kDirect) != 0) {
      DirectDescriptor d{};
      std::memcpy(&d, h->data(), sizeof d);
      c.cur_direct = true;
      c.cur_pid = d.pid;
      c.cur_address = d.address;
      c.cur_mapped = (h->first & SlotHeader::kMapped) != 0;
      c.cur_range = d.shared;
    }
  } else if (!c.cur_direct) {
    const std::size_t expect = c.cur_recv ? c.cur_recv->got : c.cur_unexpected->got;
    if (h->first != 0 || offset != expect)
      fail("ring from rank " + std::to_string(c.peer) + " is out of step (chunk at offset " +
           std::to_string(offset) + ", expected " + std::to_string(expect) + ")");
  }
  if (c.cur_direct) {
    // The slot stays full until the whole message is read: its release tells the sender its buffer is free.
    if (!read_direct(c, *h)) return true;
    store_release(h, 2 * c.rx + 2);
    ++c.rx;
    return true;
  }
  bool complete = false;
  if (c.cur_recv != nullptr) {
    ShmRecv& r = *c.cur_recv;
    deliver(r, h->data(), offset, len);
    r.got += len;
    complete = r.got == r.msg_bytes;
    if (complete) {
      r.done = true;
      c.cur_recv = nullptr;
    }
  } else {
    Unexpected& u = *c.cur_unexpected;
    if (len > 0) std::memcpy(u.data.get() + offset, h->data(), len);
    u.got += len;
    if (u.got == u.msg_bytes) c.cur_unexpected = nullptr;
  }
  // Release: the reads of this slot above happen before the producer refills it.
  store_release(h, 2 * c.rx + 2);
  ++c.rx;
  return true;
}

bool ShmTransport::pump() {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable();
  bool any = false;
  // One chunk per direction per channel per pass, so both directions of an exchange stream together.
  for (;;) {
    bool moved = false;
    for (Channel& c : channels_) {
      moved |= send_one(c);
      moved |= recv_one(c);
    }
    if (!moved) return any;
    any = true;
  }
}

void ShmTransport::cancel(ShmSend& s) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (s.done || !reaches(s.peer)) return;
  Channel& c = channel(s.peer);
  const auto it = std::find(c.sends.begin(), c.sends.end(), &s);
  if (it == c.sends.end()) return;
  if (s.started && poisoned_.empty())
    poisoned_ = "a message to rank " + std::to_string(s.peer) + " was abandoned after " + std::to_string(s.put) +
                " of its " + std::to_string(s.bytes) + " bytes";
  c.sends.erase(it);
}

void ShmTransport::cancel(ShmRecv& r) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (r.done || !reaches(r.peer)) return;
  Channel& c = channel(r.peer);
  const auto it = std::find(c.posted.begin(), c.posted.end(), &r);
  if (it != c.posted.end()) {
    c.posted.erase(it);  // never matched: a later message with its tag is simply kept aside
    return;
  }
  if (c.cur_recv == &r) {
    // Mid-message: the rest of it must not land in the caller's buffer, and the ring cannot be
    // resynchronised without it.
    c.cur_recv = nullptr;
    if (poisoned_.empty())
      poisoned_ = "a receive from rank " + std::to_string(r.peer) + " was abandoned after " + std::to_string(r.got) +
                  " of its " + std::to_string(r.msg_bytes) + " bytes";
  }
}

}  // namespace hzp::coll::detail
