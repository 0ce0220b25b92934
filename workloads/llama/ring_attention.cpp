// RingAttention (ring_attention.hpp): context-parallel causal attention over the cp group, built on the blocked
// attention kernels (online-softmax forward, blocked backward) and the communicator's point-to-point batches, on
// the caller's stream: host memory and synchronous calls on the CPU, device memory and stream-ordered work on a GPU.
#include "hzp/workloads/ring_attention.hpp"

#include <algorithm>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/collectives/phantom_peers.hpp"
#include "hzp/collectives/stream_ordered_requests.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"

namespace hzp::workloads {
namespace {

enum Tensor : int { kK = 0, kV = 1, kDK = 2, kDV = 3 };
enum Pass : int { kForward = 0, kBackward = 1 };

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

int tag(int cp, Pass pass, int step, Tensor tensor) { return (static_cast<int>(pass) * cp + step) * 4 + tensor; }

// Request::test() both polls and enforces the communicator's deadline; the shared-memory transport moves bytes
// only from inside it, so every wait keeps all of this pass's messages moving, sends included.
// Progress between blocks (test_untimed moves bytes and keeps the deadline as test() does): the compute thread is
// not waiting here, so the polls are not timed as waits (a timed test would add its own clock reads to the
// messages' wait records while the block's compute is counted too).
void keep_moving(std::vector<coll::Request>& reqs) {
  for (coll::Request& r : reqs) r.test_untimed();
}

void wait_all(std::vector<coll::Request>& reqs) {
  if (reqs.empty()) return;
  // The step's phases count this as communication the compute thread waited for (what overlapped is not); the
  // requests' records count the same wall time (coll::wait_all), which is what the harness's exposed share reads.
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "cp ring");
  coll::wait_all(reqs);
  reqs.clear();
}

// One pass's exchanges (each step's point-to-point batches) and where the compute stream meets them.
// On the host (no lane) every batch is started on the caller's host stream, polled between blocks so it moves
// while the compute thread computes, and completed at the step's end: the step after reuses its buffers.
// On a CUDA stream every batch is started on the lane's stream, after the lane has waited for an event recorded on
// the compute stream at issue (the one thing recorded there), and the lane's event is recorded after it. The
// compute stream waits for that event in arrive() only, right before the blocks that read what came, timed as an
// at-use stall (the NCCL communicator's own at-issue wait falls on the lane, which no stall clock observes), so the
// next block's transfer runs beside the block in hand. The lane's `arrived` is re-recorded by every issue, so
// arrive() is called before the next issue.
// Where the requests end: given a keeper that keeps (the step driver's on a CUDA stream), each is settled in it as
// it is issued and the host never waits for it in the pass; the keeper completes them at the step's end (counters,
// deadlines). Without one, the host waits once, at the pass's end (finish), for the requests.
// The pass's buffers (slots, state) go back to the allocator when the pass returns either way: stream-ordered,
// which is what the allocator's contract asks (it hands blocks out to work on the compute stream only, one stream:
// caching_allocator.hpp, stream_ordered_requests.hpp). finish() has made the compute stream wait for the lane's last
// event, recorded after the pass's last batch (and NCCL orders the lane after each batch's transfer), so every later
// user of a returned block on the compute stream runs after the lane let go of it, and the next pass's batches on
// the lane run after this pass's (one stream, in order). Chosen over keeping the slots with the requests until the
// step's end: that would hold 2 (forward) or 8 (backward) K/V-sized blocks per layer and micro-batch at once, a comm
// peak growing with the layer count, for no ordering the stream does not already give.
class Exchanges {
 public:
  /// keeper: non-null only when it keeps (RingAttention::keeper_for).
  Exchanges(coll::Communicator& cp, StreamRef compute, RingExchangeLane* lane, coll::StreamOrderedRequests* keeper)
      : cp_(cp), compute_(compute), lane_(lane), keeper_(keeper) {}
  Exchanges(const Exchanges&) = delete;
  Exchanges& operator=(const Exchanges&) = delete;

  void issue(std::span<const coll::SendOp> sends, std::span<const coll::RecvOp> recvs) {
    if (lane_ == nullptr) {
      hold(cp_.start_p2p_batch(sends, recvs, compute_));
      return;
    }
    lane_->issued.record(compute_);
    lane_->issued.wait(lane_->stream);
    hold(cp_.start_p2p_batch(sends, recvs, lane_->stream));
    lane_->arrived.record(lane_->stream);
    in_flight_ = true;
  }

  /// The compute stream waits for every batch issued so far (a GPU's; nothing on the host, whose batches completed
  /// at their step's end).
  void arrive() {
    if (!in_flight_) return;
    coll::time_device_wait(compute_, coll::StallKind::at_use, [&] { lane_->arrived.wait(compute_); });
    in_flight_ = false;
  }

  void poll() { keep_moving(reqs_); }
  void end_step() {
    if (lane_ == nullptr) wait_all(reqs_);
  }
  /// The pass's end: what arrived last is used by the caller (backward's dK/dV), and every request completes (the
  /// ones a keeper holds at the step's end).
  void finish() {
    arrive();
    wait_all(reqs_);
  }

 private:
  // A kept request is neither polled nor waited here: it moves on its stream (NCCL, a phantom stand-in) without the
  // host, and its counters are recorded when the keeper completes it.
  void hold(coll::Request r) {
    if (keeper_ != nullptr)
      keeper_->settle(std::move(r));
    else
      reqs_.push_back(std::move(r));
  }

  coll::Communicator& cp_;
  StreamRef compute_;
  RingExchangeLane* lane_;
  coll::StreamOrderedRequests* keeper_;
  std::vector<coll::Request> reqs_;
  bool in_flight_ = false;
};

// Row-major sub-blocks are addressed by element offset from a tensor's base.
const void* at(const void* base, std::int64_t elements, DType t) {
  return static_cast<const std::byte*>(base) + elements * static_cast<std::int64_t>(dtype_size(t));
}
void* at(void* base, std::int64_t elements, DType t) {
  return static_cast<std::byte*>(base) + elements * static_cast<std::int64_t>(dtype_size(t));
}

std::int64_t causal_pairs(std::int64_t q_chunk, std::int64_t k_chunk, std::int64_t len) {
  return k_chunk < q_chunk ? len * len : len * (len + 1) / 2;
}

// The pairs of a (query chunk, key chunk) block with document starts `first` (the query chunk's rows, global
// positions): row at position p sees keys [max(first, k0), min(p, k0 + len − 1)].
std::int64_t document_pairs(std::int64_t q_chunk, std::int64_t k_chunk, std::int64_t len,
                            std::span<const std::int32_t> first) {
  if (first.empty()) return causal_pairs(q_chunk, k_chunk, len);
  const std::int64_t k0 = k_chunk * len;
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < len; ++i) {
    const std::int64_t p = q_chunk * len + i, lo = std::max<std::int64_t>(first[static_cast<std::size_t>(i)], k0);
    n += std::max<std::int64_t>(0, std::min(p, k0 + len - 1) - lo + 1);
  }
  return n;
}

// Whether the key chunk lies wholly before every query's document: the query chunk's first row starts the earliest
// document (starts are non-decreasing along the sequence), so the block holds nothing visible.
bool before_documents(std::int64_t k_chunk, std::int64_t len, std::span<const std::int32_t> first) {
  return !first.empty() && (k_chunk + 1) * len <= first.front();
}

// Geometry shared by both passes: chunk c of the rank's (or of a block owner's) tokens of sequence b starts at
// row b·L + c·C of its [B·L, ·] tensors, and the statistics of (b, c) are its own contiguous [H, C] block.
struct Geometry {
  std::int64_t B, H, KV, D, C, L;
  int cp, rank;

  std::int64_t q_row(std::int64_t b, int c) const { return b * L + c * C; }
  /// The document starts of query chunk (b, c), or none.
  std::span<const std::int32_t> chunk_first(std::span<const std::int32_t> first, std::int64_t b, int c) const {
    return first.empty() ? first : first.subspan(static_cast<std::size_t>(q_row(b, c)), static_cast<std::size_t>(C));
  }
  kernels::AttentionDims q_dims() const { return {1, C, H, KV, D}; }
  int owner_chunk(int owner, int c) const { return c == 0 ? owner : 2 * cp - 1 - owner; }
  kernels::AttentionBlock block(int q_chunk, int k_chunk) const {
    return {.batch = 1,
            .q_len = C,
            .k_len = C,
            .heads = H,
            .kv_heads = KV,
            .head_dim = D,
            .q_pos0 = q_chunk * C,
            .k_pos0 = k_chunk * C,
            .causal = true};
  }
};

Geometry geometry(const RingAttentionDims& d, const ContextShard& shard) {
  return {d.batch, d.heads, d.kv_heads, d.head_dim, shard.chunk_len(), shard.local_len(), shard.cp(), shard.rank()};
}

}  // namespace

RingAttention::RingAttention(coll::Communicator& cp, const ContextShard& shard, RingAttentionDims dims, DType dtype,
                             CachingAllocator& alloc, RingExchangeLane* lane, coll::StreamOrderedRequests* requests)
    : cp_(cp), shard_(shard), dims_(dims), dtype_(dtype), alloc_(alloc), lane_(lane), requests_(requests) {
  HZP_CHECK(cp.size() == shard.cp() && cp.rank() == shard.rank(), "ring attention: communicator '", cp.name(),
            "' is rank ", cp.rank(), " of ", cp.size(), " but the context shard is rank ", shard.rank(),
            " of cp = ", shard.cp());
  HZP_CHECK(
      dims.batch > 0 && dims.heads > 0 && dims.kv_heads > 0 && dims.head_dim > 0 && dims.heads % dims.kv_heads == 0,
      "ring attention: batch = ", dims.batch, ", heads = ", dims.heads, ", kv_heads = ", dims.kv_heads,
      ", head_dim = ", dims.head_dim, " (all positive, heads a multiple of kv_heads)");
  HZP_CHECK(dtype == DType::f64 || dtype == DType::f32 || dtype == DType::bf16, "ring attention: dtype ",
            dtype_name(dtype), " (fp64, fp32 or bf16)");
}

RingAttentionMessages RingAttention::messages(const ContextShard& shard, const RingAttentionDims& dims, DType dtype,
                                              bool backward) {
  const std::int64_t hops = shard.cp() - 1;
  RingAttentionMessages m;
  m.dtype = dtype;
  m.elements = dims.batch * shard.local_len() * dims.kv_heads * dims.head_dim;
  m.sends = hops == 0 ? 0 : (backward ? 4 * hops + 2 : 2 * hops);
  m.steps = hops == 0 ? 0 : shard.cp();
  m.posted_before = 2 * hops;  // K and V, before each step's block but the last (forward and backward)
  return m;
}

std::int64_t RingAttention::visible_pairs(const ContextShard& shard, const RingAttentionDims& dims) {
  const std::int64_t T = shard.seq_len();
  return dims.batch * dims.heads * (T * (T + 1) / 2) / shard.cp();
}

void RingAttention::check_activation(const char* name, const ConstTensorView& t, bool kv, Device device) const {
  const std::int64_t heads = kv ? dims_.kv_heads : dims_.heads;
  const std::int64_t B = dims_.batch, L = shard_.local_len(), D = dims_.head_dim;
  const Shape& s = t.shape();
  const bool flat = s.ndim == 2 && s[0] == B * L && s[1] == heads * D;
  const bool full = s.ndim == 4 && s[0] == B && s[1] == L && s[2] == heads && s[3] == D;
  HZP_CHECK(flat || full, "ring attention: ", name, " has shape ", to_string(s), ", expected [", B * L, ", ", heads * D,
            "] or [", B, ", ", L, ", ", heads, ", ", D, "] (batch = ", B, ", local_len = ", L, ", ",
            kv ? "kv_heads" : "heads", " = ", heads, ", head_dim = ", D, ")");
  HZP_CHECK(t.dtype() == dtype_, "ring attention: ", name, " holds ", dtype_name(t.dtype()), ", expected ",
            dtype_name(dtype_));
  HZP_CHECK(t.device() == device && t.data() != nullptr, "ring attention: ", name, " must be a non-null tensor on ",
            to_string(device), " (the stream's memory), not ", to_string(t.device()));
}

void RingAttention::check_lse(const ConstTensorView& t, Device device) const {
  const std::int64_t B = dims_.batch, H = dims_.heads, L = shard_.local_len();
  const Shape& s = t.shape();
  HZP_CHECK(s.ndim == 3 && s[0] == B && s[1] == H && s[2] == L, "ring attention: lse has shape ", to_string(s),
            ", expected [", B, ", ", H, ", ", L, "] (batch, heads, local_len)");
  HZP_CHECK(t.dtype() == acc_dtype(dtype_), "ring attention: lse holds ", dtype_name(t.dtype()), ", expected ",
            dtype_name(acc_dtype(dtype_)), " for ", dtype_name(dtype_), " activations");
  HZP_CHECK(t.device() == device && t.data() != nullptr, "ring attention: lse must be a non-null tensor on ",
            to_string(device), " (the stream's memory), not ", to_string(t.device()));
}

void RingAttention::check_stream(StreamRef s) const {
  // Slots, state and scratch come from the allocator and are handed to kernels on `s`: one memory.
  HZP_CHECK(s.device() == alloc_.device(), "ring attention: the stream is on ", to_string(s.device()),
            " but the allocator hands out memory on ", to_string(alloc_.device()));
}

RingExchangeLane* RingAttention::lane_for(StreamRef s) {
  if (s.device().is_cpu() || shard_.cp() == 1) return nullptr;
  if (lane_ == nullptr) {
    if (!own_lane_) own_lane_ = std::make_unique<RingExchangeLane>(s.device());
    lane_ = own_lane_.get();
  }
  HZP_CHECK(lane_->stream.device() == s.device(), "ring attention: the exchange lane is on ",
            to_string(lane_->stream.device()), " but the stream on ", to_string(s.device()),
            " (give the ring a lane of the stream's device)");
  return lane_;
}

coll::StreamOrderedRequests* RingAttention::keeper_for(StreamRef s) const {
  if (requests_ == nullptr || requests_->completion() != coll::StreamOrderedRequests::Completion::kept) return nullptr;
  // complete() synchronises the keeper's stream before it waits: it must be the stream the lane's work joins.
  HZP_CHECK(requests_->stream() == s, "ring attention: the request keeper keeps requests on stream ",
            requests_->stream().native(), " of ", to_string(requests_->stream().device()), " but the pass runs on stream ",
            s.native(), " of ", to_string(s.device()), " (give the ring the keeper of its compute stream)");
  HZP_CHECK(!s.device().is_cpu() || coll::phantom_peers(cp_), "ring attention: a request keeper that keeps requests "
            "on the host stream, over '", cp_.name(), "' whose peers are real: a host transfer moves only inside the "
            "waits a kept request skips (keep on the host only over phantom peers; a run's keeper waits at once there)");
  return requests_;
}

void RingAttention::check_first(std::span<const std::int32_t> first, std::span<const std::int32_t> stream_first,
                                StreamRef s) const {
  const std::int64_t n = dims_.batch * shard_.local_len();
  HZP_CHECK(first.empty() || static_cast<std::int64_t>(first.size()) == n, "ring attention: first holds ", first.size(),
            " document starts, expected batch x local_len = ", n, " (or none)");
  HZP_CHECK(stream_first.empty() || stream_first.size() == first.size(), "ring attention: stream_first holds ",
            stream_first.size(), " document starts but first holds ", first.size(), " (the same starts, twice)");
  HZP_CHECK(first.empty() || s.device().is_cpu() || !stream_first.empty(), "ring attention: document starts on ",
            to_string(s.device()), " need their device copy (stream_first; MicroBatchContext::stream_document_first)");
}

std::span<const std::int32_t> RingAttention::check_pass(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                       ConstTensorView out, ConstTensorView lse, StreamRef s,
                                                       std::span<const std::int32_t> first,
                                                       std::span<const std::int32_t> stream_first) const {
  check_stream(s);
  check_first(first, stream_first, s);
  check_activation("q", q, false, s.device());
  check_activation("k", k, true, s.device());
  check_activation("v", v, true, s.device());
  check_activation("out", out, false, s.device());
  check_lse(lse, s.device());
  // The kernels read the starts in the stream's memory; the skips and pair counts read the host's.
  return stream_first.empty() ? first : stream_first;
}

void RingAttention::forward(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                            StreamRef s, std::span<const std::int32_t> first,
                            std::span<const std::int32_t> stream_first) {
  const Device dev = s.device();
  const std::span<const std::int32_t> kernel_first = check_pass(q, k, v, out, lse, s, first, stream_first);

  const Geometry g = geometry(dims_, shard_);
  const DType t = dtype_, a = acc_dtype(t);
  const std::int64_t q_width = g.H * g.D, kv_width = g.KV * g.D, stats = g.H * g.C;
  const std::int64_t kv_elements = g.B * g.L * kv_width;
  const auto asz = static_cast<std::int64_t>(dtype_size(a));

  // The online-softmax state of every (sequence, local query chunk) lives through all cp steps.
  const std::int64_t n_q = 2 * g.B;
  Allocation acc = alloc_.allocate(static_cast<std::size_t>(n_q * g.C * q_width * asz), AllocationTag::workspace);
  Allocation row_max = alloc_.allocate(static_cast<std::size_t>(n_q * stats * asz), AllocationTag::workspace);
  Allocation row_sum = alloc_.allocate(static_cast<std::size_t>(n_q * stats * asz), AllocationTag::workspace);
  Allocation lse_part = alloc_.allocate(static_cast<std::size_t>(stats * asz), AllocationTag::workspace);
  Allocation scratch =
      alloc_.allocate(kernels::attention_block_fwd_workspace_bytes(g.block(0, 0), t, alloc_.device()),
                      AllocationTag::workspace);
  auto acc_v = [&](std::int64_t i) {
    return TensorView(at(acc.data(), i * g.C * q_width, a), {1, g.C, g.H, g.D}, a, dev);
  };
  auto max_v = [&](std::int64_t i) { return TensorView(at(row_max.data(), i * stats, a), {1, g.H, g.C}, a, dev); };
  auto sum_v = [&](std::int64_t i) { return TensorView(at(row_sum.data(), i * stats, a), {1, g.H, g.C}, a, dev); };
  for (std::int64_t i = 0; i < n_q; ++i)
    kernels::attention_block_state_init(acc_v(i), max_v(i), sum_v(i), g.q_dims(), s);

  // Two slots per tensor: one receives the next block while the other, in hand, is computed and sent on.
  Allocation slot_k[2], slot_v[2];
  if (g.cp > 1)
    for (int i = 0; i < 2; ++i) {
      slot_k[i] = alloc_.allocate(static_cast<std::size_t>(kv_elements) * dtype_size(t), AllocationTag::comm);
      slot_v[i] = alloc_.allocate(static_cast<std::size_t>(kv_elements) * dtype_size(t), AllocationTag::comm);
    }
  const int next = (g.rank + 1) % g.cp, prev = (g.rank + g.cp - 1) % g.cp;
  auto block = [&](const void* base) { return TensorView(const_cast<void*>(base), {kv_elements}, t, dev); };
  const void* k_hand = k.data();
  const void* v_hand = v.data();
  Exchanges ex(cp_, s, lane_for(s), keeper_for(s));
  forward_pairs_ = 0;

  for (int step = 0; step < g.cp; ++step) {
    const int owner = (g.rank - step + g.cp) % g.cp;
    ex.arrive();  // the K/V block in hand (a GPU's: received on the lane during the previous step's blocks)
    if (step + 1 < g.cp) {
      // One batch per step: receives from prev and sends to next issued together, so no backend's ordering
      // can make every rank wait on its receive first (NCCL runs a communicator's calls in order).
      const int slot = step % 2;
      const coll::RecvOp recvs[] = {{block(slot_k[slot].data()), prev, tag(g.cp, kForward, step, kK)},
                                    {block(slot_v[slot].data()), prev, tag(g.cp, kForward, step, kV)}};
      const coll::SendOp sends[] = {{block(k_hand), next, tag(g.cp, kForward, step, kK)},
                                    {block(v_hand), next, tag(g.cp, kForward, step, kV)}};
      ex.issue(sends, recvs);
    }
    for (std::int64_t b = 0; b < g.B; ++b)
      for (int qc = 0; qc < 2; ++qc)
        for (int kc = 0; kc < 2; ++kc) {
          const int gq = shard_.chunk(qc), gk = g.owner_chunk(owner, kc);
          if (gk > gq) continue;  // every query of the chunk precedes every key: nothing visible
          const auto f = g.chunk_first(first, b, qc);
          if (before_documents(gk, g.C, f)) continue;  // every query's document starts after these keys
          const std::int64_t i = b * 2 + qc, kr = g.q_row(b, kc) * kv_width;
          kernels::attention_block_fwd(
              acc_v(i), max_v(i), sum_v(i),
              ConstTensorView(at(q.data(), g.q_row(b, qc) * q_width, t), {1, g.C, g.H, g.D}, t, dev),
              ConstTensorView(at(k_hand, kr, t), {1, g.C, g.KV, g.D}, t, dev),
              ConstTensorView(at(v_hand, kr, t), {1, g.C, g.KV, g.D}, t, dev), g.block(gq, gk),
              {static_cast<std::byte*>(scratch.data()), scratch.size()}, s, g.chunk_first(kernel_first, b, qc));
          forward_pairs_ += g.H * document_pairs(gq, gk, g.C, f);
          ex.poll();
        }
    ex.end_step();
    if (step + 1 < g.cp) {
      k_hand = slot_k[step % 2].data();
      v_hand = slot_v[step % 2].data();
    }
  }
  ex.finish();  // a GPU's exchanges, waited here or kept (the host's completed at each step)

  // lse of (b, c) is [H, C] rows of stride L inside [B, H, L]: finish into a contiguous part, then scatter it
  // (copies on the stream: a memcpy on the host).
  for (std::int64_t b = 0; b < g.B; ++b)
    for (int qc = 0; qc < 2; ++qc) {
      const std::int64_t i = b * 2 + qc;
      kernels::attention_block_finish(
          TensorView(at(out.data(), g.q_row(b, qc) * q_width, t), {1, g.C, g.H, g.D}, t, dev),
          TensorView(lse_part.data(), {1, g.H, g.C}, a, dev), acc_v(i), max_v(i), sum_v(i), g.q_dims(), s);
      for (std::int64_t h = 0; h < g.H; ++h)
        copy_bytes(at(lse.data(), (b * g.H + h) * g.L + qc * g.C, a), dev, at(lse_part.data(), h * g.C, a), dev,
                   static_cast<std::size_t>(g.C * asz), s);
    }
}

void RingAttention::backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                             ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                             StreamRef s, std::span<const std::int32_t> first,
                             std::span<const std::int32_t> stream_first) {
  const Device dev = s.device();
  const std::span<const std::int32_t> kernel_first = check_pass(q, k, v, out, lse, s, first, stream_first);
  check_activation("dq", dq, false, dev);
  check_activation("dk", dk, true, dev);
  check_activation("dv", dv, true, dev);
  check_activation("dout", dout, false, dev);

  const Geometry g = geometry(dims_, shard_);
  const DType t = dtype_, a = acc_dtype(t);
  const std::int64_t q_width = g.H * g.D, kv_width = g.KV * g.D, stats = g.H * g.C;
  const std::int64_t kv_elements = g.B * g.L * kv_width;
  const auto asz = static_cast<std::int64_t>(dtype_size(a));
  const std::int64_t n_q = 2 * g.B;

  // The kernels read a query block's lse and Δ as contiguous [1, H, C]: gathered once, shared by all steps.
  Allocation lse_c = alloc_.allocate(static_cast<std::size_t>(n_q * stats * asz), AllocationTag::workspace);
  Allocation delta = alloc_.allocate(static_cast<std::size_t>(n_q * stats * asz), AllocationTag::workspace);
  Allocation scratch =
      alloc_.allocate(kernels::attention_block_bwd_workspace_bytes(g.block(0, 0), t, alloc_.device()),
                      AllocationTag::workspace);
  auto lse_v = [&](std::int64_t i) { return TensorView(at(lse_c.data(), i * stats, a), {1, g.H, g.C}, a, dev); };
  auto delta_v = [&](std::int64_t i) { return TensorView(at(delta.data(), i * stats, a), {1, g.H, g.C}, a, dev); };
  auto q_rows = [&](const void* base, std::int64_t b, int c) {
    return ConstTensorView(at(base, g.q_row(b, c) * q_width, t), {1, g.C, g.H, g.D}, t, dev);
  };
  for (std::int64_t b = 0; b < g.B; ++b)
    for (int qc = 0; qc < 2; ++qc) {
      const std::int64_t i = b * 2 + qc;
      for (std::int64_t h = 0; h < g.H; ++h)
        copy_bytes(at(lse_c.data(), i * stats + h * g.C, a), dev, at(lse.data(), (b * g.H + h) * g.L + qc * g.C, a),
                   dev, static_cast<std::size_t>(g.C * asz), s);
      kernels::attention_row_delta(delta_v(i), q_rows(dout.data(), b, qc), q_rows(out.data(), b, qc), g.q_dims(), s);
    }

  // K and V travel as in forward; the dK/dV accumulators of the block's owner travel with them, one step
  // behind the compute (they are sent once this rank's queries have added to them), and after the last step
  // take one more hop, into the owner's dk/dv. The owner's own accumulators start in dk/dv themselves.
  Allocation slot[2][4];
  if (g.cp > 1)
    for (auto& sl : slot)
      for (auto& buf : sl)
        buf = alloc_.allocate(static_cast<std::size_t>(kv_elements) * dtype_size(t), AllocationTag::comm);
  const int next = (g.rank + 1) % g.cp, prev = (g.rank + g.cp - 1) % g.cp;
  auto whole = [&](const void* base) { return TensorView(const_cast<void*>(base), {kv_elements}, t, dev); };
  const void* k_hand = k.data();
  const void* v_hand = v.data();
  void* dk_hand = dk.data();
  void* dv_hand = dv.data();
  std::vector<char> dq_started(static_cast<std::size_t>(n_q), 0);
  Exchanges ex(cp_, s, lane_for(s), keeper_for(s));
  backward_pairs_ = 0;

  for (int step = 0; step < g.cp; ++step) {
    const int owner = (g.rank - step + g.cp) % g.cp;
    const int sl = step % 2;
    ex.arrive();  // K, V and the owner's dK/dV accumulators in hand (the previous step's two batches, on a GPU)
    if (step + 1 < g.cp) {
      const coll::RecvOp recvs[] = {{whole(slot[sl][kK].data()), prev, tag(g.cp, kBackward, step, kK)},
                                    {whole(slot[sl][kV].data()), prev, tag(g.cp, kBackward, step, kV)}};
      const coll::SendOp sends[] = {{whole(k_hand), next, tag(g.cp, kBackward, step, kK)},
                                    {whole(v_hand), next, tag(g.cp, kBackward, step, kV)}};
      ex.issue(sends, recvs);
    }

    // Accumulators that arrive have been written by their owner's step 0; ours start empty.
    std::vector<char> kv_started(static_cast<std::size_t>(n_q), step == 0 ? 0 : 1);
    for (std::int64_t b = 0; b < g.B; ++b)
      for (int qc = 0; qc < 2; ++qc)
        for (int kc = 0; kc < 2; ++kc) {
          const int gq = shard_.chunk(qc), gk = g.owner_chunk(owner, kc);
          if (gk > gq) continue;
          const auto f = g.chunk_first(first, b, qc);
          if (before_documents(gk, g.C, f)) continue;
          const std::int64_t i = b * 2 + qc, j = b * 2 + kc, kr = g.q_row(b, kc) * kv_width;
          const kernels::AttentionBlockAccumulate accumulate{.dq = dq_started[static_cast<std::size_t>(i)] != 0,
                                                             .dkv = kv_started[static_cast<std::size_t>(j)] != 0};
          kernels::attention_block_bwd(
              TensorView(at(dq.data(), g.q_row(b, qc) * q_width, t), {1, g.C, g.H, g.D}, t, dev),
              TensorView(at(dk_hand, kr, t), {1, g.C, g.KV, g.D}, t, dev),
              TensorView(at(dv_hand, kr, t), {1, g.C, g.KV, g.D}, t, dev), q_rows(dout.data(), b, qc),
              q_rows(q.data(), b, qc), ConstTensorView(at(k_hand, kr, t), {1, g.C, g.KV, g.D}, t, dev),
              ConstTensorView(at(v_hand, kr, t), {1, g.C, g.KV, g.D}, t, dev), lse_v(i), delta_v(i), g.block(gq, gk),
              accumulate, {static_cast<std::byte*>(scratch.data()), scratch.size()}, s,
              g.chunk_first(kernel_first, b, qc));
          dq_started[static_cast<std::size_t>(i)] = 1;
          kv_started[static_cast<std::size_t>(j)] = 1;
          backward_pairs_ += g.H * document_pairs(gq, gk, g.C, f);
          ex.poll();
        }
    // At step 0 each of our key chunks meets its own query chunk (the diagonal, never skipped: a query sees
    // itself, documents or not), and later accumulators arrive written, so this never fires; it keeps the
    // accumulators defined should the layout change.
    for (std::int64_t j = 0; j < n_q; ++j)
      if (!kv_started[static_cast<std::size_t>(j)]) {
        const std::int64_t kr = g.q_row(j / 2, static_cast<int>(j % 2)) * kv_width;
        zero_bytes(at(dk_hand, kr, t), static_cast<std::size_t>(g.C * kv_width) * dtype_size(t), s);
        zero_bytes(at(dv_hand, kr, t), static_cast<std::size_t>(g.C * kv_width) * dtype_size(t), s);
      }
    if (g.cp > 1) {
      // The accumulators in hand go on to next, and prev's arrive (for the next step, or after the last one,
      // complete, into the owner's dk/dv), in one batch posted after this step's blocks: the receive is matched
      // by a send prev posts after its own blocks, so on NCCL the two must be one group on every rank (a receive
      // posted earlier, in the batch before the blocks, would wait on a send queued behind that very batch).
      // dk/dv went out at step 0 and that send completed (or, on a GPU, precedes this batch on the stream).
      void* dk_to = step + 1 < g.cp ? slot[sl][kDK].data() : dk.data();
      void* dv_to = step + 1 < g.cp ? slot[sl][kDV].data() : dv.data();
      const coll::RecvOp recvs[] = {{whole(dk_to), prev, tag(g.cp, kBackward, step, kDK)},
                                    {whole(dv_to), prev, tag(g.cp, kBackward, step, kDV)}};
      const coll::SendOp sends[] = {{whole(dk_hand), next, tag(g.cp, kBackward, step, kDK)},
                                    {whole(dv_hand), next, tag(g.cp, kBackward, step, kDV)}};
      ex.issue(sends, recvs);
    }
    ex.end_step();
    if (step + 1 < g.cp) {
      k_hand = slot[sl][kK].data();
      v_hand = slot[sl][kV].data();
      dk_hand = slot[sl][kDK].data();
      dv_hand = slot[sl][kDV].data();
    }
  }
  ex.finish();  // the last hop wrote dk/dv: the compute stream waits for it before the caller reads them
  for (std::int64_t i = 0; i < n_q; ++i)
    if (!dq_started[static_cast<std::size_t>(i)])
      zero_bytes(at(dq.data(), g.q_row(i / 2, static_cast<int>(i % 2)) * q_width, t),
                 static_cast<std::size_t>(g.C * q_width) * dtype_size(t), s);
}

}  // namespace hzp::workloads
