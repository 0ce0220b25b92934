// Latency-optimal algorithms for small messages (fewer rounds than the ring's p - 1, at equal or
// modestly higher bytes): Bruck all_gather (ceil(log2 p) rounds), direct reduce_scatter (one round),
// recursive-doubling all_reduce (log2 p rounds, two more when p is not a power of two).
#include <algorithm>
#include <cstring>

#include "algorithm.hpp"

namespace hzp::coll::detail {
namespace {

// After round k rank r holds blocks r .. r + 2^(k+1) - 1 (mod p), all in their final places in
// `out`: round k receives from r + 2^k the blocks it holds. A block range that wraps past p is
// sent as two messages; sender and receiver name the same absolute blocks, so they split alike.
class BruckAllGather final : public Algorithm {
 public:
  BruckAllGather(int rank, int p, std::byte* out, const std::byte* own_in, std::int64_t n, std::size_t elem)
      : rank_(rank), p_(p), out_(out), own_in_(own_in), block_bytes_(static_cast<std::size_t>(n) * elem) {}
  std::string_view name() const noexcept override { return "bruck"; }

  bool step(int round, Poster& post) override {
    if (round == 0 && !post.dry()) {
      std::byte* own = block(rank_);
      if (own != own_in_ && block_bytes_ > 0) std::memcpy(own, own_in_, block_bytes_);
    }
    if (round >= ceil_log2(p_)) return false;
    const int d = 1 << round;
    const int cnt = std::min(d, p_ - d);
    post_range(post, /*send=*/true, rank_, cnt, mod(rank_ - d, p_));
    post_range(post, /*send=*/false, mod(rank_ + d, p_), cnt, mod(rank_ + d, p_));
    return true;
  }

 private:
  std::byte* block(int j) const { return at(out_, static_cast<std::int64_t>(block_bytes_) * j); }
  void post_range(Poster& post, bool send, int first, int cnt, int peer) {
    const int head = std::min(cnt, p_ - first);  // blocks before the wrap
    // Kept: every block of `out` is written once, our own by the copy in round 0 and block rank + j by the receive
    // of the round k with 2^k <= j < 2^(k+1); round k sends only blocks rank .. rank + 2^k - 1, all written in
    // earlier rounds. No block is written after it is sent, in place or not.
    auto one = [&](int b, int c) {
      if (send)
        post.send_kept(block(b), block_bytes_ * static_cast<std::size_t>(c), peer);
      else
        post.recv(block(b), block_bytes_ * static_cast<std::size_t>(c), peer);
    };
    one(first, head);
    if (cnt > head) one(0, cnt - head);
  }

  int rank_, p_;
  std::byte* out_;
  const std::byte* own_in_;
  std::size_t block_bytes_;
};

// Every rank sends block j of its input to rank j (unreduced input: the user's type on the wire),
// then reduces the p contributions in rank order, so every element is reduced in the same order
// whatever order the messages arrived in.
class DirectReduceScatter final : public Algorithm {
 public:
  DirectReduceScatter(int rank, int p, const std::byte* in, std::byte* out, std::int64_t n, const Reducer& red,
                      std::byte* scratch)
      : rank_(rank), p_(p), in_(in), out_(out), n_(static_cast<std::size_t>(n)), red_(red), scratch_(scratch) {}
  std::string_view name() const noexcept override { return "direct"; }

  bool step(int round, Poster& post) override {
    if (round == 0) {
      // Kept: the input is only read (reduce_scatter refuses in overlapping out); the received blocks and the
      // accumulator live in the scratch.
      for (int j = 1; j < p_; ++j) {
        const int to = mod(rank_ + j, p_);
        post.send_kept(at(in_, static_cast<std::int64_t>(n_ * red_.elem()) * to), n_ * red_.elem(), to);
      }
      for (int j = 1; j < p_; ++j) {
        const int from = mod(rank_ - j, p_);
        post.recv(slot(from), n_ * red_.elem(), from);
      }
      return true;
    }
    if (!post.dry()) reduce_in_rank_order();
    return false;
  }

 private:
  // Contribution of rank j: our own input for j == rank, else its received block.
  const std::byte* contribution(int j) const {
    return j == rank_ ? at(in_, static_cast<std::int64_t>(n_ * red_.elem()) * rank_) : slot(j);
  }
  std::byte* slot(int j) const {
    const int s = j < rank_ ? j : j - 1;  // p - 1 slots, our own rank has none
    return at(scratch_, static_cast<std::int64_t>(n_ * red_.elem()) * s);
  }
  void reduce_in_rank_order() {
    if (p_ == 1) {
      if (out_ != in_) std::memmove(out_, in_, n_ * red_.elem());
      return;
    }
    const bool widen = red_.acc != red_.dtype;
    std::byte* acc = widen ? at(scratch_, static_cast<std::int64_t>(n_ * red_.elem()) * (p_ - 1)) : out_;
    red_.combine(acc, contribution(0), red_.dtype, contribution(1), red_.dtype, n_);
    for (int j = 2; j < p_; ++j) red_.combine(acc, acc, red_.acc, contribution(j), red_.dtype, n_);
    if (widen) red_.finish(out_, acc, n_);
  }

  int rank_, p_;
  const std::byte* in_;
  std::byte* out_;
  std::size_t n_;
  Reducer red_;
  std::byte* scratch_;
};

// Ranks 0 .. 2*rem - 1 pair up first (even folds into odd), leaving a power of two q of
// participants; then log2 q rounds of exchanging the full accumulator with newrank ^ 2^k; then each
// odd rank hands the result back to its even partner. Partners always combine (lower, higher), so
// every rank computes bitwise the same result.
class RecursiveDoublingAllReduce final : public Algorithm {
 public:
  RecursiveDoublingAllReduce(int rank, int p, std::byte* buf, std::int64_t n, const Reducer& red,
                             std::byte* scratch)
      : rank_(rank), p_(p), buf_(buf), n_(static_cast<std::size_t>(n)), red_(red) {
    q_ = 1;
    while (q_ * 2 <= p_) q_ *= 2;
    rem_ = p_ - q_;
    levels_ = 0;
    while ((1 << levels_) < q_) ++levels_;
    acc_ = scratch;
    tmp_ = at(scratch, static_cast<std::int64_t>(n_ * red_.acc_elem()));
    if (rank_ < 2 * rem_)
      newrank_ = rank_ % 2 == 1 ? rank_ / 2 : -1;
    else
      newrank_ = rank_ - rem_;
  }
  std::string_view name() const noexcept override { return "recursive_doubling"; }

  bool step(int round, Poster& post) override {
    const int pre = rem_ > 0 ? 1 : 0;
    const bool dry = post.dry();
    // Local work enabled by the previous round.
    if (round == pre && !dry && newrank_ >= 0) {
      if (pre && rank_ < 2 * rem_)  // odd: fold in the even partner's input, lower rank first
        red_.combine(acc_, tmp_, red_.dtype, buf_, red_.dtype, n_);
      else
        red_.widen(acc_, buf_, n_);
    }
    if (round > pre && round <= pre + levels_ && !dry && newrank_ >= 0) {
      const int k = round - pre - 1;
      const bool partner_lower = (newrank_ ^ (1 << k)) < newrank_;
      if (partner_lower)
        red_.combine(acc_, tmp_, red_.acc, acc_, red_.acc, n_);
      else
        red_.combine(acc_, acc_, red_.acc, tmp_, red_.acc, n_);
    }
    if (round == pre + levels_ && !dry && newrank_ >= 0) red_.finish(buf_, acc_, n_);  // the one rounding

    if (round < pre) {
      if (rank_ < 2 * rem_) {
        // Kept: an even rank writes buf only by the hand-back receive of the last round, whose bytes its partner
        // sends after this round's receive (the read of these bytes) completed.
        if (rank_ % 2 == 0)
          post.send_kept(buf_, n_ * red_.elem(), rank_ + 1);
        else
          post.recv(tmp_, n_ * red_.elem(), rank_ - 1);
      }
      return true;
    }
    if (round < pre + levels_) {
      if (newrank_ >= 0) {
        const int partner_new = newrank_ ^ (1 << (round - pre));
        const int partner = partner_new < rem_ ? partner_new * 2 + 1 : partner_new + rem_;
        // Not kept: the next round combines into acc_. A fresh accumulator per level would keep it (log2 q more
        // vectors of scratch, growing with p): nothing the next partner sends waits for the last one's read. acc_
        // is the communicator's private scratch, so only single copy sends it by descriptor, never mapped.
        post.send(acc_, n_ * red_.acc_elem(), partner);
        post.recv(tmp_, n_ * red_.acc_elem(), partner);
      }
      return true;
    }
    if (round == pre + levels_ && pre) {
      if (rank_ < 2 * rem_) {
        if (rank_ % 2 == 1)  // kept: the call's last message, buf finished before it
          post.send_kept(buf_, n_ * red_.elem(), rank_ - 1);
        else
          post.recv(buf_, n_ * red_.elem(), rank_ + 1);
      }
      return true;
    }
    return false;
  }

 private:
  int rank_, p_;
  std::byte* buf_;
  std::size_t n_;
  Reducer red_;
  int q_ = 1, rem_ = 0, levels_ = 0, newrank_ = 0;
  std::byte* acc_ = nullptr;
  std::byte* tmp_ = nullptr;
};

}  // namespace

std::unique_ptr<Algorithm> make_bruck_all_gather(int rank, int p, std::byte* out, const std::byte* own_in,
                                                 std::int64_t n, std::size_t elem) {
  return std::make_unique<BruckAllGather>(rank, p, out, own_in, n, elem);
}

std::size_t direct_reduce_scatter_scratch_bytes(int p, std::int64_t n, const Reducer& red) {
  return static_cast<std::size_t>(n) * (static_cast<std::size_t>(p - 1) * red.elem() + red.acc_elem());
}

std::unique_ptr<Algorithm> make_direct_reduce_scatter(int rank, int p, const std::byte* in, std::byte* out,
                                                      std::int64_t n, const Reducer& red, std::byte* scratch) {
  return std::make_unique<DirectReduceScatter>(rank, p, in, out, n, red, scratch);
}

std::size_t recursive_doubling_scratch_bytes(std::int64_t n, const Reducer& red) {
  return 2 * static_cast<std::size_t>(n) * red.acc_elem();
}

std::unique_ptr<Algorithm> make_recursive_doubling_all_reduce(int rank, int p, std::byte* buf, std::int64_t n,
                                                              const Reducer& red, std::byte* scratch) {
  return std::make_unique<RecursiveDoublingAllReduce>(rank, p, buf, n, red, scratch);
}

}  // namespace hzp::coll::detail
