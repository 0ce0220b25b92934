// Ring algorithms (bandwidth-optimal): all_gather, reduce_scatter, and all_reduce as a
// reduce-scatter ring followed by an all-gather ring. Each round every rank sends one block to
// rank + 1 and receives one from rank - 1, so over node-contiguous ranks only the hops that cross a
// node boundary are inter-node (docs/collectives.md "Bytes per level").
#include <cstring>

#include "algorithm.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll::detail {
namespace {

class RingAllGather final : public Algorithm {
 public:
  RingAllGather(int rank, int p, std::byte* out, const std::byte* own_in, Blocks blocks, std::size_t elem)
      : rank_(rank), p_(p), out_(out), own_in_(own_in), blocks_(blocks), elem_(elem) {}
  std::string_view name() const noexcept override { return "ring"; }

  bool step(int round, Poster& post) override {
    const int next = mod(rank_ + 1, p_);
    std::byte* own = block(rank_);
    const std::size_t own_bytes = bytes_of(rank_);
    // Own block copied while it streams out (round 0 sends it anyway): one read of own_in, the second
    // write made from the cache-hot slot. Only out of place and when round 0 has a hop to stream on.
    const bool fuse_own = round == 0 && p_ > 1 && !post.dry() && own_in_ != nullptr && own != own_in_ &&
                          own_bytes > 0 && post.streams(next);
    if (round == 0 && !post.dry() && own_in_ != nullptr && !fuse_own && own != own_in_ && own_bytes > 0)
      std::memcpy(own, own_in_, own_bytes);
    if (round >= p_ - 1) return false;
    // Round s forwards the block received in round s - 1 (round 0: our own).
    const int send_block = mod(rank_ - round, p_);
    const int recv_block = mod(rank_ - round - 1, p_);
    // Every send is kept (never written again in this call): round s receives block rank - s - 1, so the
    // receives fill p - 1 distinct blocks, none of them our own; a block is sent only in the round after it was
    // received (or, our own, after the copy above or from own_in, which the call only reads). No block is written
    // after it is sent, in place (own_in is our block or null) or not.
    if (fuse_own)
      post.send_and_copy(own_in_, own_bytes, next, own);
    else
      post.send_kept(block(send_block), bytes_of(send_block), next);
    post.recv(block(recv_block), bytes_of(recv_block), mod(rank_ - 1, p_));
    return true;
  }

 private:
  std::byte* block(int j) const { return at(out_, blocks_.offset(j) * static_cast<std::int64_t>(elem_)); }
  std::size_t bytes_of(int j) const { return static_cast<std::size_t>(blocks_.count(j)) * elem_; }

  int rank_, p_;
  std::byte* out_;
  const std::byte* own_in_;
  Blocks blocks_;
  std::size_t elem_;
};

// Round s sends the partial sum of block (rank - s - 1) and receives that of block (rank - s - 2);
// the received partial is combined with our own input of that block and sent on in round s + 1.
// After p - 1 rounds the partial of our own block has visited every rank.
//
// Two ways to combine, same operands in the same order (bitwise the same result): plain, the partial
// lands in `recv_` and the next step combines it into `send_`; fused (the hop from rank - 1 streams),
// each arriving chunk is combined with our input straight out of the shared slot, into one of two
// ping-pong halves of the scratch (the half sent in round s + 1 is not the one round s + 1 receives
// into), and on the last hop straight into the output, rounded once.
class RingReduceScatter final : public Algorithm {
 public:
  RingReduceScatter(int rank, int p, const std::byte* in, std::byte* out_own, Blocks blocks, const Reducer& red,
                    std::byte* scratch)
      : rank_(rank), p_(p), in_(in), out_own_(out_own), blocks_(blocks), red_(red) {
    const std::size_t half = static_cast<std::size_t>(blocks.max_count()) * red.acc_elem();
    recv_ = scratch;
    send_ = at(scratch, static_cast<std::int64_t>(half));
  }
  std::string_view name() const noexcept override { return "ring"; }

  bool step(int round, Poster& post) override {
    if (round > p_ - 1) return false;
    const int prev = mod(rank_ - 1, p_), next = mod(rank_ + 1, p_);
    if (round == 0) fused_ = p_ > 1 && !post.dry() && post.streams(prev);
    // Wire type of what arrived in round - 1: a rank's own input on the first hop, partials after.
    const DType got = round == 1 ? red_.dtype : red_.acc;
    if (round == p_ - 1) {
      if (!fused_) finish(got, post.dry());  // fused: the last receive already wrote the output
      return false;
    }
    const int send_block = mod(rank_ - round - 1, p_);
    const std::size_t n_send = static_cast<std::size_t>(blocks_.count(send_block));
    if (round == 0) {
      // Kept: the input is only read by this algorithm (reduce_scatter refuses in overlapping out; for all_reduce's
      // in-place use see make_ring_all_reduce).
      post.send_kept(input(send_block), n_send * red_.elem(), next);
    } else if (fused_) {
      // The partial sent in round s is half(s - 1), which round s + 1 receives into again, unless round s + 1 is the
      // last (p - 2, which receives into the output) or there is none: kept in rounds p - 3 and p - 2 only. The
      // earlier ones would each need a half of their own (p - 2 blocks of scratch instead of 2, up to the whole
      // input in the accumulator type): round s + 1's receive carries what rank - 1 sent after its round s, and no
      // chain of completed rounds puts rank + 1's read of round s before that (it runs p - 2 hops round the ring).
      // Not done: the partials leave from the communicator's private scratch, so only single copy sends them by
      // descriptor, never mapped buffers.
      if (round >= p_ - 3)
        post.send_kept(half(round - 1), n_send * red_.acc_elem(), next);  // combined while it arrived
      else
        post.send(half(round - 1), n_send * red_.acc_elem(), next);
    } else {
      // Not kept: send_ is recombined every round, and by finish() when widening (this path runs only where the
      // hop from rank - 1 is over MPI, another machine).
      if (!post.dry()) red_.combine(send_, recv_, got, input(send_block), red_.dtype, n_send);
      post.send(send_, n_send * red_.acc_elem(), next);
    }
    const int recv_block = mod(rank_ - round - 2, p_);
    const std::size_t n_recv = static_cast<std::size_t>(blocks_.count(recv_block));
    const DType wire = round == 0 ? red_.dtype : red_.acc;
    if (fused_) {
      const bool last = round == p_ - 2;  // recv_block is then our own block
      post.recv_reduce(last ? out_own_ : half(round), input(recv_block), wire, red_.dtype, n_recv, red_, last, prev);
    } else {
      post.recv(recv_, n_recv * dtype_size(wire), prev);
    }
    return true;
  }

 private:
  const std::byte* input(int j) const {
    return at(in_, blocks_.offset(j) * static_cast<std::int64_t>(red_.elem()));
  }
  // Fused: the partial received in round s lives in half s % 2 until it is sent in round s + 1.
  std::byte* half(int s) const { return s % 2 == 0 ? recv_ : send_; }
  void finish(DType got, bool dry) {
    if (dry) return;
    const std::size_t n = static_cast<std::size_t>(blocks_.count(rank_));
    if (p_ == 1) {
      if (out_own_ != input(rank_)) std::memmove(out_own_, input(rank_), n * red_.elem());
      return;
    }
    if (red_.acc == red_.dtype) {
      red_.combine(out_own_, recv_, got, input(rank_), red_.dtype, n);
    } else {
      // One rounding to the user's type, after the last addition.
      red_.combine(send_, recv_, got, input(rank_), red_.dtype, n);
      red_.finish(out_own_, send_, n);
    }
  }

  int rank_, p_;
  const std::byte* in_;
  std::byte* out_own_;
  Blocks blocks_;
  Reducer red_;
  std::byte* recv_ = nullptr;
  std::byte* send_ = nullptr;
  bool fused_ = false;
};

/// Runs `first` to completion, then `second`; second's round 0 is posted in the step that finishes
/// first, so the phases do not cost an extra round.
class Sequence final : public Algorithm {
 public:
  Sequence(std::unique_ptr<Algorithm> first, std::unique_ptr<Algorithm> second)
      : first_(std::move(first)), second_(std::move(second)) {}
  std::string_view name() const noexcept override { return first_->name(); }
  bool step(int round, Poster& post) override {
    if (second_base_ < 0) {
      if (first_->step(round, post)) return true;
      second_base_ = round;
    }
    return second_->step(round - second_base_, post);
  }

 private:
  std::unique_ptr<Algorithm> first_, second_;
  int second_base_ = -1;
};

}  // namespace

void Poster::send_and_copy(const void*, std::size_t, int peer, void*) {
  HZP_THROW(PreconditionError, "internal: send_and_copy to rank ", peer, " on a hop that does not stream");
}
void Poster::recv_reduce(void*, const void*, DType, DType, std::size_t, const Reducer&, bool, int peer) {
  HZP_THROW(PreconditionError, "internal: recv_reduce from rank ", peer, " on a hop that does not stream");
}

std::unique_ptr<Algorithm> make_ring_all_gather(int rank, int p, std::byte* out, const std::byte* own_in,
                                                Blocks blocks, std::size_t elem) {
  return std::make_unique<RingAllGather>(rank, p, out, own_in, blocks, elem);
}

std::size_t ring_reduce_scratch_bytes(Blocks blocks, const Reducer& red) {
  return 2 * static_cast<std::size_t>(blocks.max_count()) * red.acc_elem();
}

std::unique_ptr<Algorithm> make_ring_reduce_scatter(int rank, int p, const std::byte* in, std::byte* out_own,
                                                    Blocks blocks, const Reducer& red, std::byte* scratch) {
  return std::make_unique<RingReduceScatter>(rank, p, in, out_own, blocks, red, scratch);
}

std::unique_ptr<Algorithm> make_ring_all_reduce(int rank, int p, std::byte* buf, std::int64_t n,
                                                const Reducer& red, std::byte* scratch) {
  const Blocks chunks{n, p};
  std::byte* own = at(buf, chunks.offset(rank) * static_cast<std::int64_t>(red.elem()));
  // The all-gather phase moves finished chunks, already rounded to the user's type: bf16 is
  // rounded once, in the reduce-scatter's last step.
  //
  // Kept sends in place. The all-gather phase's are kept for its own reasons (above); the reduce-scatter writes only
  // our own chunk (its last step), which it never sent. The one chunk sent and later written is chunk rank - 1: sent
  // in reduce-scatter round 0 to rank + 1, overwritten by the all-gather's round 0 receive. That receive's bytes
  // come from rank - 1's all-gather round 0, which rank - 1 posts only after its reduce-scatter round p - 2
  // completed; a round is posted only after the previous one completed, and round s's receive carries what the
  // sender combined after its round s - 1, so rank - 1's round p - 2 receive completes after rank - 1 - j's round
  // p - 2 - j receive for every j up to p - 2: rank + 1's round 0 receive, the read of our chunk. So the chunk is
  // read before any byte can overwrite it, whenever the send itself ends (MPI or shared memory, any p >= 2).
  return std::make_unique<Sequence>(make_ring_reduce_scatter(rank, p, buf, own, chunks, red, scratch),
                                    make_ring_all_gather(rank, p, buf, nullptr, chunks, red.elem()));
}

}  // namespace hzp::coll::detail
