// The live round engine: runs an Algorithm one round at a time (the next round is posted from test()
// once the previous one has completed), each message over the shared-memory transport when it
// reaches the peer (the timing header rides in the slots) or else over MPI_Isend/MPI_Irecv on the
// communicator's own MPI_Comm (paired with a header message), counting the bytes this rank sends per
// link level as it posts them: bytes by construction, whatever the transport. A kept send read in place over shared
// memory ends its round at once; the call waits for the receivers' reads at its end (docs/collectives.md "Mapped
// buffers").
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <sstream>
#include <vector>

#include "comm_state.hpp"
#include "hzp/core/clock.hpp"
#include "mpi_check.hpp"
#include "shm_transport.hpp"

namespace hzp::coll::detail {
namespace {

class P2POperation final : public Operation, private Poster {
 public:
  P2POperation(CommState& st, std::unique_ptr<Algorithm> alg, TagPair tags, Header own, ScratchPool::Lease scratch,
               JoinBooking book)
      : st_(st), shm_(st.shm.get()), alg_(std::move(alg)), tags_(tags), known_(own), scratch_(std::move(scratch)),
        book_(std::move(book)), join_round_(static_cast<bool>(book_)) {
    reqs_.reserve(8);
    peers_.reserve(8);
  }
  ~P2POperation() override { abandon(); }

  /// Posts round 0 (and starts moving its shared-memory messages). Separate from the constructor so
  /// a throw leaves nothing half-built.
  void begin() {
    advance_rounds();
    if (shm_ && !finished_) progress();
  }

  bool progress() override {
    moved_ = false;
    while (!finished_) {
      // Moves every chunk that can move, on every channel of the communicator: this call's and those
      // of other calls in flight on it (their receives are matched by tag), as MPI progresses all.
      if (shm_ && shm_->pump()) moved_ = true;
      if (!round_done()) return false;
      round_complete();
      advance_rounds();
    }
    // The caller gets its buffers back only once every receiver has read its kept sends.
    while (!unread_.empty()) {
      if (!shm_->read_by_peer(unread_.back().peer, unread_.back().chunk)) {
        if (shm_->pump()) moved_ = true;
        if (!shm_->read_by_peer(unread_.back().peer, unread_.back().chunk)) return false;
      }
      unread_.pop_back();
    }
    return true;
  }
  bool moved() const noexcept override { return moved_; }

  Header known() const noexcept override { return known_; }
  std::array<std::uint64_t, kNumLinkLevels> bytes() const noexcept override { return bytes_; }
  bool bytes_modelled() const noexcept override { return false; }
  std::string_view algorithm() const noexcept override { return alg_->name(); }

  std::string pending() const override {
    std::ostringstream os;
    if (finished_ && !unread_.empty()) {
      os << alg_->name() << " done, waiting for " << unread_.size() << " kept send(s) to be read, the first by rank "
         << unread_.back().peer;
      return os.str();
    }
    // round_ - 1 is the round in flight; with a join round in front the algorithm's own rounds count from 1.
    if (book_)
      os << alg_->name() << " join round (the members' join times), waiting on ";
    else
      os << alg_->name() << " round " << round_ - 1 - (join_round_ ? 1 : 0) << ", waiting on ";
    // Which of the round's messages are still open (MPI_Testall leaves completed ones inactive).
    std::vector<int> waiting;
    for (std::size_t i = 0; i < reqs_.size(); ++i)
      if (reqs_[i] != MPI_REQUEST_NULL) waiting.push_back(peers_[i]);
    for (const ShmSend& m : shm_sends_)
      if (!m.done) waiting.push_back(m.peer);
    for (const ShmRecv& m : shm_recvs_)
      if (!m.done) waiting.push_back(m.peer);
    if (waiting.empty()) {
      os << "nothing (local work)";
    } else {
      os << "messages with ranks {";
      for (std::size_t i = 0; i < waiting.size(); ++i) os << (i ? ", " : "") << waiting[i];
      os << "}";
      if (!shm_sends_.empty() || !shm_recvs_.empty()) os << " (shared memory: " << shm_pending() << ")";
    }
    return os.str();
  }

  void abandon() noexcept override {
    // Withdrawn from the transport first: it must never touch these descriptors (or the caller's
    // buffers behind them) again. One caught mid-message poisons the transport (shm_transport.hpp).
    if (shm_) {
      for (ShmSend& m : shm_sends_) shm_->cancel(m);
      for (ShmRecv& m : shm_recvs_) shm_->cancel(m);
      for (const ShmSend& m : shm_sends_)
        if (m.unread) shm_->abandon_unread(m.peer, m.ack_chunk);
      for (const Unread& u : unread_) shm_->abandon_unread(u.peer, u.chunk);
    }
    unread_.clear();
    shm_sends_.clear();
    shm_recvs_.clear();
    for (std::size_t i = 0; i < reqs_.size(); ++i) {
      MPI_Request& r = reqs_[i];
      if (r == MPI_REQUEST_NULL) continue;
      if (recv_flags_[i]) {
        // Cancelled and completed (briefly), so a late message cannot land in a buffer the caller
        // frees next. A receive already matched to a live sender completes instead.
        MPI_Cancel(&r);
        const double give_up = wall_seconds() + 1.0;
        int done = 0;
        while (!done && wall_seconds() < give_up) {
          MPI_Test(&r, &done, MPI_STATUS_IGNORE);
          if (!done) sched_yield();
        }
        if (!done) MPI_Request_free(&r);
      } else {
        // Cancelling sends is deprecated in MPI-4: let it finish (or not) on its own.
        MPI_Request_free(&r);
      }
    }
    reqs_.clear();
  }

 private:
  // ---- Poster: what the algorithm posts -----------------------------------------------------------
  void send(const void* buf, std::size_t bytes, int peer) override { post_send(buf, bytes, peer, nullptr, false); }
  void send_kept(const void* buf, std::size_t bytes, int peer) override {
    post_send(buf, bytes, peer, nullptr, true);
  }
  void send_and_copy(const void* buf, std::size_t bytes, int peer, void* copy_to) override {
    post_send(buf, bytes, peer, copy_to, true);
  }

  void post_send(const void* buf, std::size_t bytes, int peer, void* copy_to, bool kept) {
    if (shm_ && shm_->reaches(peer)) {
      ShmSend& m = shm_sends_.emplace_back();  // deque: the transport holds its address
      m.peer = peer;
      m.tag = tags_.data;
      m.src = static_cast<const std::byte*>(buf);
      m.bytes = bytes;
      m.copy_to = static_cast<std::byte*>(copy_to);
      m.header = known_;
      m.early = kept;
      shm_->post(m);
    } else {
      if (copy_to != nullptr && bytes > 0) std::memcpy(copy_to, buf, bytes);
      send_headers_.push_back(known_);  // deque: earlier headers stay where MPI was told they are
      post(MPI_Isend(&send_headers_.back(), 2, MPI_DOUBLE, peer, tags_.header, st_.comm, &next()), peer, false);
      if (bytes > 0) {
        post(MPI_Isend_c(buf, static_cast<MPI_Count>(bytes), MPI_BYTE, peer, tags_.data, st_.comm, &next()), peer,
             false);
      }
    }
    ++posted_;
    bytes_[static_cast<int>(st_.level_to(peer))] += bytes;
  }

  void recv(void* buf, std::size_t bytes, int peer) override {
    if (shm_ && shm_->reaches(peer)) {
      ShmRecv& m = new_shm_recv(peer);
      m.dst = static_cast<std::byte*>(buf);
      m.capacity = bytes;
      shm_->post(m);
    } else {
      recv_headers_.emplace_back();
      post(MPI_Irecv(&recv_headers_.back(), 2, MPI_DOUBLE, peer, tags_.header, st_.comm, &next()), peer, true);
      if (bytes > 0) {
        post(MPI_Irecv_c(buf, static_cast<MPI_Count>(bytes), MPI_BYTE, peer, tags_.data, st_.comm, &next()), peer,
             true);
      }
    }
    ++posted_;
  }

  void recv_reduce(void* dst, const void* b, DType a_type, DType b_type, std::size_t n, const Reducer& red,
                   bool finish, int peer) override {
    HZP_CHECK(streams(peer), "recv_reduce from rank ", peer, ", a hop that does not stream");
    ShmRecv& m = new_shm_recv(peer);
    m.dst = static_cast<std::byte*>(dst);
    m.capacity = n * dtype_size(a_type);
    m.reduce = true;
    m.b = static_cast<const std::byte*>(b);
    m.a_type = a_type;
    m.b_type = b_type;
    m.red = red;
    m.finish = finish;
    shm_->post(m);
    ++posted_;
  }

  bool dry() const noexcept override { return false; }
  bool streams(int peer) const noexcept override { return shm_ && shm_->reaches(peer); }

  ShmRecv& new_shm_recv(int peer) {
    ShmRecv& m = shm_recvs_.emplace_back();  // deque: the transport holds its address
    m.peer = peer;
    m.tag = tags_.data;
    return m;
  }

  std::string shm_pending() const {
    std::ostringstream os;
    bool first = true;
    for (const ShmSend& m : shm_sends_)
      if (!m.done) {
        os << (first ? "" : ", ") << "send to " << m.peer << " " << m.put << "/" << m.bytes << " B";
        first = false;
      }
    for (const ShmRecv& m : shm_recvs_)
      if (!m.done) {
        os << (first ? "" : ", ") << "receive from " << m.peer << " ";
        if (m.matched)
          os << m.got << "/" << m.msg_bytes << " B";
        else
          os << "not started";
        first = false;
      }
    return os.str();
  }

  // The round's messages are all complete: shared-memory ones (set by pump) and MPI ones.
  bool round_done() {
    for (const ShmSend& m : shm_sends_)
      if (!m.done) return false;
    for (const ShmRecv& m : shm_recvs_)
      if (!m.done) return false;
    if (reqs_.empty()) return true;
    int done = 0;
    HZP_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }

  MPI_Request& next() {
    reqs_.push_back(MPI_REQUEST_NULL);
    return reqs_.back();
  }
  void post(int rc, int peer, bool is_recv) {
    peers_.push_back(peer);
    recv_flags_.push_back(is_recv ? 1 : 0);
    if (rc != MPI_SUCCESS) {
      reqs_.back() = MPI_REQUEST_NULL;
      HZP_THROW(MpiError, "posting a message of ", alg_->name(), " to/from rank ", peer,
                " failed: ", describe_mpi(rc));
    }
  }

  void round_complete() {
    for (const Header& h : recv_headers_) known_.merge(h);
    for (const ShmRecv& m : shm_recvs_) known_.merge(m.header);
    for (const ShmSend& m : shm_sends_)
      if (m.unread) unread_.push_back({m.peer, m.ack_chunk});
    shm_sends_.clear();
    shm_recvs_.clear();
    posted_ = 0;
    reqs_.clear();
    peers_.clear();
    recv_flags_.clear();
    send_headers_.clear();
    recv_headers_.clear();
  }

  // Steps the algorithm until a round leaves messages in flight or it finishes. A round in which
  // this rank posts nothing (idle in a tree or a doubling pre-step) completes at once.
  void advance_rounds() {
    while (!finished_ && posted_ == 0) {
      if (round_ == 1 && book_) {
        // The join round is done: every member's join is heard, so the links are booked where the call can run.
        known_.ready = std::max(known_.ready, book_(known_.join));
        book_ = nullptr;
      }
      if (!alg_->step(round_++, *this)) finished_ = true;
    }
  }

  CommState& st_;
  ShmTransport* shm_;  // null: every hop over MPI
  std::unique_ptr<Algorithm> alg_;
  TagPair tags_;
  Header known_;
  ScratchPool::Lease scratch_;
  JoinBooking book_;  // empty once called, or when the call books at launch
  bool join_round_;   // round 0 is the join round (book_ was given)
  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;
  std::vector<int> recv_flags_;
  std::deque<Header> send_headers_, recv_headers_;
  std::deque<ShmSend> shm_sends_;
  std::deque<ShmRecv> shm_recvs_;
  // Kept sends that ended before their receiver read them (ShmSend::unread): the call ends once all are read.
  struct Unread {
    int peer;
    std::uint64_t chunk;
  };
  std::vector<Unread> unread_;
  int posted_ = 0;  // messages posted in the current round, on either transport
  bool moved_ = false;
  std::array<std::uint64_t, kNumLinkLevels> bytes_{};
  int round_ = 0;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Operation> make_p2p_operation(CommState& st, std::unique_ptr<Algorithm> alg, TagPair tags,
                                              Header own, ScratchPool::Lease scratch, JoinBooking book) {
  auto op = std::make_unique<P2POperation>(st, std::move(alg), tags, own, std::move(scratch), std::move(book));
  op->begin();
  return op;
}

TagPair collective_tags(std::uint64_t seq) noexcept {
  // 8192 + 2 * 12287 + 1 = 32767, the smallest MPI_TAG_UB the standard allows.
  const int slot = static_cast<int>(seq % 12287u);
  return {8192 + 2 * slot, 8192 + 2 * slot + 1};
}

TagPair p2p_tags(int user_tag) noexcept { return {2 * user_tag, 2 * user_tag + 1}; }

}  // namespace hzp::coll::detail
