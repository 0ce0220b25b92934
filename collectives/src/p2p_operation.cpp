// The live round engine: runs an Algorithm over MPI_Isend/MPI_Irecv on the communicator's own
// MPI_Comm, one round at a time (the next round is posted from test() once the previous one has
// completed), pairing every data message with a timing header, and counting the bytes this rank
// sends per link level as it posts them: bytes by construction.
#include <sched.h>

#include <deque>
#include <sstream>
#include <vector>

#include "comm_state.hpp"
#include "hzp/core/clock.hpp"
#include "mpi_check.hpp"

namespace hzp::coll::detail {
namespace {

class P2POperation final : public Operation, private Poster {
 public:
  P2POperation(CommState& st, std::unique_ptr<Algorithm> alg, TagPair tags, Header own, ScratchPool::Lease scratch)
      : st_(st), alg_(std::move(alg)), tags_(tags), known_(own), scratch_(std::move(scratch)) {
    reqs_.reserve(8);
    peers_.reserve(8);
  }
  ~P2POperation() override { abandon(); }

  /// Posts round 0. Separate from the constructor so a throw leaves nothing half-built.
  void begin() { advance_rounds(); }

  bool progress() override {
    if (finished_) return true;
    if (!reqs_.empty()) {
      int done = 0;
      HZP_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE));
      if (!done) return false;
      round_complete();
    }
    advance_rounds();
    return finished_;
  }

  Header known() const noexcept override { return known_; }
  std::array<std::uint64_t, kNumLinkLevels> bytes() const noexcept override { return bytes_; }
  bool bytes_modelled() const noexcept override { return false; }
  std::string_view algorithm() const noexcept override { return alg_->name(); }

  std::string pending() const override {
    std::ostringstream os;
    os << alg_->name() << " round " << round_ - 1 << ", waiting on ";
    // Which of the round's messages are still open (MPI_Testall leaves completed ones inactive).
    std::vector<int> waiting;
    for (std::size_t i = 0; i < reqs_.size(); ++i)
      if (reqs_[i] != MPI_REQUEST_NULL) waiting.push_back(peers_[i]);
    if (waiting.empty()) {
      os << "nothing (local work)";
    } else {
      os << "messages with ranks {";
      for (std::size_t i = 0; i < waiting.size(); ++i) os << (i ? ", " : "") << waiting[i];
      os << "}";
    }
    return os.str();
  }

  void abandon() noexcept override {
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
  void send(const void* buf, std::size_t bytes, int peer) override {
    send_headers_.push_back(known_);  // deque: earlier headers stay where MPI was told they are
    post(MPI_Isend(&send_headers_.back(), 2, MPI_DOUBLE, peer, tags_.header, st_.comm, &next()), peer, false);
    if (bytes > 0) {
      post(MPI_Isend_c(buf, static_cast<MPI_Count>(bytes), MPI_BYTE, peer, tags_.data, st_.comm, &next()), peer,
           false);
    }
    bytes_[static_cast<int>(st_.level_to(peer))] += bytes;
  }
  void recv(void* buf, std::size_t bytes, int peer) override {
    recv_headers_.emplace_back();
    post(MPI_Irecv(&recv_headers_.back(), 2, MPI_DOUBLE, peer, tags_.header, st_.comm, &next()), peer, true);
    if (bytes > 0) {
      post(MPI_Irecv_c(buf, static_cast<MPI_Count>(bytes), MPI_BYTE, peer, tags_.data, st_.comm, &next()), peer,
           true);
    }
  }
  bool dry() const noexcept override { return false; }

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
    reqs_.clear();
    peers_.clear();
    recv_flags_.clear();
    send_headers_.clear();
    recv_headers_.clear();
  }

  // Steps the algorithm until a round leaves messages in flight or it finishes. A round in which
  // this rank posts nothing (idle in a tree or a doubling pre-step) completes at once.
  void advance_rounds() {
    while (!finished_ && reqs_.empty()) {
      if (!alg_->step(round_++, *this)) finished_ = true;
    }
  }

  CommState& st_;
  std::unique_ptr<Algorithm> alg_;
  TagPair tags_;
  Header known_;
  ScratchPool::Lease scratch_;
  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;
  std::vector<int> recv_flags_;
  std::deque<Header> send_headers_, recv_headers_;
  std::array<std::uint64_t, kNumLinkLevels> bytes_{};
  int round_ = 0;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Operation> make_p2p_operation(CommState& st, std::unique_ptr<Algorithm> alg, TagPair tags,
                                              Header own, ScratchPool::Lease scratch) {
  auto op = std::make_unique<P2POperation>(st, std::move(alg), tags, own, std::move(scratch));
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
