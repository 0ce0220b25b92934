// Algorithms without reductions: pairwise all_to_all(v), binomial-tree broadcast, dissemination
// barrier, and the single message of send/recv.
#include <cstring>
#include <vector>

#include "algorithm.hpp"

namespace hzp::coll::detail {
namespace {

// Round k (1 .. p-1) sends to rank + k and receives from rank - k, so every round is a
// permutation and no rank receives twice at once; all_at_once posts every round together (one
// round of latency, for small blocks).
class PairwiseAllToAllv final : public Algorithm {
 public:
  PairwiseAllToAllv(int rank, int p, const std::byte* in, std::span<const std::int64_t> send_counts, std::byte* out,
                    std::span<const std::int64_t> recv_counts, std::size_t elem, bool all_at_once)
      : rank_(rank), p_(p), in_(in), out_(out), elem_(elem), all_at_once_(all_at_once),
        send_counts_(send_counts.begin(), send_counts.end()),
        recv_counts_(recv_counts.begin(), recv_counts.end()),
        send_off_(static_cast<std::size_t>(p) + 1, 0), recv_off_(static_cast<std::size_t>(p) + 1, 0) {
    for (int q = 0; q < p; ++q) {
      send_off_[q + 1] = send_off_[q] + send_counts_[q];
      recv_off_[q + 1] = recv_off_[q] + recv_counts_[q];
    }
  }
  std::string_view name() const noexcept override { return all_at_once_ ? "pairwise_all_at_once" : "pairwise"; }

  bool step(int round, Poster& post) override {
    if (round == 0 && !post.dry()) {
      const std::size_t own = static_cast<std::size_t>(send_counts_[rank_]) * elem_;
      if (own > 0) std::memcpy(out_ + recv_off_[rank_] * elem_, in_ + send_off_[rank_] * elem_, own);
    }
    const int rounds = p_ == 1 ? 0 : (all_at_once_ ? 1 : p_ - 1);
    if (round >= rounds) return false;
    const int k_first = all_at_once_ ? 1 : round + 1;
    const int k_last = all_at_once_ ? p_ - 1 : round + 1;
    // Kept: the input is only read (all_to_all(v) refuses in overlapping out).
    for (int k = k_first; k <= k_last; ++k) {
      const int to = mod(rank_ + k, p_);
      post.send_kept(at(in_, send_off_[to] * static_cast<std::int64_t>(elem_)),
                static_cast<std::size_t>(send_counts_[to]) * elem_, to);
    }
    for (int k = k_first; k <= k_last; ++k) {
      const int from = mod(rank_ - k, p_);
      post.recv(at(out_, recv_off_[from] * static_cast<std::int64_t>(elem_)),
                static_cast<std::size_t>(recv_counts_[from]) * elem_, from);
    }
    return true;
  }

 private:
  int rank_, p_;
  const std::byte* in_;
  std::byte* out_;
  std::size_t elem_;
  bool all_at_once_;
  std::vector<std::int64_t> send_counts_, recv_counts_, send_off_, recv_off_;
};

class BinomialBroadcast final : public Algorithm {
 public:
  BinomialBroadcast(int rank, int p, int root, std::byte* buf, std::size_t bytes)
      : rank_(rank), p_(p), root_(root), buf_(buf), bytes_(bytes) {}
  std::string_view name() const noexcept override { return "binomial_tree"; }

  bool step(int round, Poster& post) override {
    if (round >= ceil_log2(p_)) return false;
    const int d = 1 << round;
    const int vr = mod(rank_ - root_, p_);  // relative rank: the root is 0
    // Kept: a rank sends only in rounds after the one it received in (relative rank vr < d sends, d <= vr < 2d
    // receives), and it receives once, so buf is never written after its first send.
    if (vr < d && vr + d < p_) post.send_kept(buf_, bytes_, mod(vr + d + root_, p_));
    if (vr >= d && vr < 2 * d) post.recv(buf_, bytes_, mod(vr - d + root_, p_));
    return true;
  }

 private:
  int rank_, p_, root_;
  std::byte* buf_;
  std::size_t bytes_;
};

// After round k a rank has heard (transitively) from the 2^(k+1) - 1 ranks before it, so after
// ceil(log2 p) rounds from everyone: everyone has joined.
class DisseminationBarrier final : public Algorithm {
 public:
  DisseminationBarrier(int rank, int p) : rank_(rank), p_(p) {}
  std::string_view name() const noexcept override { return "dissemination"; }
  bool step(int round, Poster& post) override {
    if (round >= ceil_log2(p_)) return false;
    const int d = 1 << round;
    post.send(nullptr, 0, mod(rank_ + d, p_));
    post.recv(nullptr, 0, mod(rank_ - d, p_));
    return true;
  }

 private:
  int rank_, p_;
};

class PointToPoint final : public Algorithm {
 public:
  PointToPoint(bool is_send, std::byte* buf, std::size_t bytes, int peer)
      : is_send_(is_send), buf_(buf), bytes_(bytes), peer_(peer) {}
  std::string_view name() const noexcept override { return "p2p"; }
  bool step(int round, Poster& post) override {
    if (round > 0) return false;
    if (is_send_)
      post.send(buf_, bytes_, peer_);
    else
      post.recv(buf_, bytes_, peer_);
    return true;
  }

 private:
  bool is_send_;
  std::byte* buf_;  // not written when is_send_
  std::size_t bytes_;
  int peer_;
};

}  // namespace

std::unique_ptr<Algorithm> make_pairwise_all_to_allv(int rank, int p, const std::byte* in,
                                                     std::span<const std::int64_t> send_counts, std::byte* out,
                                                     std::span<const std::int64_t> recv_counts, std::size_t elem,
                                                     bool all_at_once) {
  return std::make_unique<PairwiseAllToAllv>(rank, p, in, send_counts, out, recv_counts, elem, all_at_once);
}

std::unique_ptr<Algorithm> make_binomial_broadcast(int rank, int p, int root, std::byte* buf, std::size_t bytes) {
  return std::make_unique<BinomialBroadcast>(rank, p, root, buf, bytes);
}

std::unique_ptr<Algorithm> make_dissemination_barrier(int rank, int p) {
  return std::make_unique<DisseminationBarrier>(rank, p);
}

std::unique_ptr<Algorithm> make_send(const std::byte* buf, std::size_t bytes, int peer) {
  return std::make_unique<PointToPoint>(true, const_cast<std::byte*>(buf), bytes, peer);
}

std::unique_ptr<Algorithm> make_recv(std::byte* buf, std::size_t bytes, int peer) {
  return std::make_unique<PointToPoint>(false, buf, bytes, peer);
}

}  // namespace hzp::coll::detail
