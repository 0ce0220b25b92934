// RingAttention (ring_attention.hpp): context-parallel causal attention over the cp group, built on the blocked
// attention kernels (online-softmax forward, blocked backward) and the communicator's point-to-point messages.
#include "hzp/workloads/ring_attention.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "hzp/collectives/communicator.hpp"
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
void poll(std::vector<coll::Request>& reqs) {
  for (coll::Request& r : reqs) r.test_untimed();
}

void wait_all(std::vector<coll::Request>& reqs) {
  // The step's phases count this as communication the compute thread waited for (what overlapped is not); the
  // requests' records count the same wall time (coll::wait_all), which is what the harness's exposed share reads.
  const profile::ScopedPhase phase(profile::Phase::comm_wait, "cp ring");
  coll::wait_all(reqs);
  reqs.clear();
}

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
                             CachingAllocator& alloc)
    : cp_(cp), shard_(shard), dims_(dims), dtype_(dtype), alloc_(alloc) {
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

void RingAttention::check_activation(const char* name, const ConstTensorView& t, bool kv) const {
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
  HZP_CHECK(t.device().is_cpu() && t.data() != nullptr, "ring attention: ", name,
            " must be a non-null host tensor (the blocked kernels run on the CPU only)");
}

void RingAttention::check_lse(const ConstTensorView& t) const {
  const std::int64_t B = dims_.batch, H = dims_.heads, L = shard_.local_len();
  const Shape& s = t.shape();
  HZP_CHECK(s.ndim == 3 && s[0] == B && s[1] == H && s[2] == L, "ring attention: lse has shape ", to_string(s),
            ", expected [", B, ", ", H, ", ", L, "] (batch, heads, local_len)");
  HZP_CHECK(t.dtype() == acc_dtype(dtype_), "ring attention: lse holds ", dtype_name(t.dtype()), ", expected ",
            dtype_name(acc_dtype(dtype_)), " for ", dtype_name(dtype_), " activations");
  HZP_CHECK(t.device().is_cpu() && t.data() != nullptr, "ring attention: lse must be a non-null host tensor");
}

void RingAttention::check_stream(StreamRef s) const {
  HZP_CHECK(s.device().is_cpu(),
            "ring attention: a CUDA stream was given, but the blocked attention kernels it "
            "runs on exist for the CPU only");
}

void RingAttention::check_first(std::span<const std::int32_t> first) const {
  const std::int64_t n = dims_.batch * shard_.local_len();
  HZP_CHECK(first.empty() || static_cast<std::int64_t>(first.size()) == n, "ring attention: first holds ", first.size(),
            " document starts, expected batch x local_len = ", n, " (or none)");
}

void RingAttention::forward(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                            StreamRef s, std::span<const std::int32_t> first) {
  check_stream(s);
  check_first(first);
  check_activation("q", q, false);
  check_activation("k", k, true);
  check_activation("v", v, true);
  check_activation("out", out, false);
  check_lse(lse);

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
      alloc_.allocate(kernels::attention_block_fwd_workspace_bytes(g.block(0, 0), t), AllocationTag::workspace);
  auto acc_v = [&](std::int64_t i) { return TensorView(at(acc.data(), i * g.C * q_width, a), {1, g.C, g.H, g.D}, a); };
  auto max_v = [&](std::int64_t i) { return TensorView(at(row_max.data(), i * stats, a), {1, g.H, g.C}, a); };
  auto sum_v = [&](std::int64_t i) { return TensorView(at(row_sum.data(), i * stats, a), {1, g.H, g.C}, a); };
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
  const void* k_hand = k.data();
  const void* v_hand = v.data();
  std::vector<coll::Request> reqs;
  forward_pairs_ = 0;

  for (int step = 0; step < g.cp; ++step) {
    const int owner = (g.rank - step + g.cp) % g.cp;
    if (step + 1 < g.cp) {
      const int slot = step % 2;
      reqs.push_back(
          cp_.start_recv(TensorView(slot_k[slot].data(), {kv_elements}, t), prev, tag(g.cp, kForward, step, kK), s));
      reqs.push_back(
          cp_.start_recv(TensorView(slot_v[slot].data(), {kv_elements}, t), prev, tag(g.cp, kForward, step, kV), s));
      reqs.push_back(cp_.start_send(ConstTensorView(k_hand, {kv_elements}, t), next, tag(g.cp, kForward, step, kK), s));
      reqs.push_back(cp_.start_send(ConstTensorView(v_hand, {kv_elements}, t), next, tag(g.cp, kForward, step, kV), s));
    }
    for (std::int64_t b = 0; b < g.B; ++b)
      for (int qc = 0; qc < 2; ++qc)
        for (int kc = 0; kc < 2; ++kc) {
          const int gq = shard_.chunk(qc), gk = g.owner_chunk(owner, kc);
          if (gk > gq) continue;  // every query of the chunk precedes every key: nothing visible
          const auto f = first.empty() ? first : first.subspan(static_cast<std::size_t>(g.q_row(b, qc)), g.C);
          if (before_documents(gk, g.C, f)) continue;  // every query's document starts after these keys
          const std::int64_t i = b * 2 + qc, kr = g.q_row(b, kc) * kv_width;
          kernels::attention_block_fwd(
              acc_v(i), max_v(i), sum_v(i),
              ConstTensorView(at(q.data(), g.q_row(b, qc) * q_width, t), {1, g.C, g.H, g.D}, t),
              ConstTensorView(at(k_hand, kr, t), {1, g.C, g.KV, g.D}, t),
              ConstTensorView(at(v_hand, kr, t), {1, g.C, g.KV, g.D}, t), g.block(gq, gk),
              {static_cast<std::byte*>(scratch.data()), scratch.size()}, s, f);
          forward_pairs_ += g.H * document_pairs(gq, gk, g.C, f);
          poll(reqs);
        }
    wait_all(reqs);
    if (step + 1 < g.cp) {
      k_hand = slot_k[step % 2].data();
      v_hand = slot_v[step % 2].data();
    }
  }

  // lse of (b, c) is [H, C] rows of stride L inside [B, H, L]: finish into a contiguous part, then scatter it.
  for (std::int64_t b = 0; b < g.B; ++b)
    for (int qc = 0; qc < 2; ++qc) {
      const std::int64_t i = b * 2 + qc;
      kernels::attention_block_finish(TensorView(at(out.data(), g.q_row(b, qc) * q_width, t), {1, g.C, g.H, g.D}, t),
                                      TensorView(lse_part.data(), {1, g.H, g.C}, a), acc_v(i), max_v(i), sum_v(i),
                                      g.q_dims(), s);
      for (std::int64_t h = 0; h < g.H; ++h)
        std::memcpy(at(lse.data(), (b * g.H + h) * g.L + qc * g.C, a), at(lse_part.data(), h * g.C, a),
                    static_cast<std::size_t>(g.C * asz));
    }
}

void RingAttention::backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                             ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                             StreamRef s, std::span<const std::int32_t> first) {
  check_stream(s);
  check_first(first);
  check_activation("dq", dq, false);
  check_activation("dk", dk, true);
  check_activation("dv", dv, true);
  check_activation("dout", dout, false);
  check_activation("q", q, false);
  check_activation("k", k, true);
  check_activation("v", v, true);
  check_activation("out", out, false);
  check_lse(lse);

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
      alloc_.allocate(kernels::attention_block_bwd_workspace_bytes(g.block(0, 0), t), AllocationTag::workspace);
  auto lse_v = [&](std::int64_t i) { return TensorView(at(lse_c.data(), i * stats, a), {1, g.H, g.C}, a); };
  auto delta_v = [&](std::int64_t i) { return TensorView(at(delta.data(), i * stats, a), {1, g.H, g.C}, a); };
  auto q_rows = [&](const void* base, std::int64_t b, int c) {
    return ConstTensorView(at(base, g.q_row(b, c) * q_width, t), {1, g.C, g.H, g.D}, t);
  };
  for (std::int64_t b = 0; b < g.B; ++b)
    for (int qc = 0; qc < 2; ++qc) {
      const std::int64_t i = b * 2 + qc;
      for (std::int64_t h = 0; h < g.H; ++h)
        std::memcpy(at(lse_c.data(), i * stats + h * g.C, a), at(lse.data(), (b * g.H + h) * g.L + qc * g.C, a),
                    static_cast<std::size_t>(g.C * asz));
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
  const void* k_hand = k.data();
  const void* v_hand = v.data();
  void* dk_hand = dk.data();
  void* dv_hand = dv.data();
  std::vector<char> dq_started(static_cast<std::size_t>(n_q), 0);
  std::vector<coll::Request> reqs;
  backward_pairs_ = 0;

  for (int step = 0; step < g.cp; ++step) {
    const int owner = (g.rank - step + g.cp) % g.cp;
    const int sl = step % 2;
    if (step + 1 < g.cp) {
      reqs.push_back(
          cp_.start_recv(TensorView(slot[sl][kK].data(), {kv_elements}, t), prev, tag(g.cp, kBackward, step, kK), s));
      reqs.push_back(
          cp_.start_recv(TensorView(slot[sl][kV].data(), {kv_elements}, t), prev, tag(g.cp, kBackward, step, kV), s));
      reqs.push_back(
          cp_.start_recv(TensorView(slot[sl][kDK].data(), {kv_elements}, t), prev, tag(g.cp, kBackward, step, kDK), s));
      reqs.push_back(
          cp_.start_recv(TensorView(slot[sl][kDV].data(), {kv_elements}, t), prev, tag(g.cp, kBackward, step, kDV), s));
      reqs.push_back(
          cp_.start_send(ConstTensorView(k_hand, {kv_elements}, t), next, tag(g.cp, kBackward, step, kK), s));
      reqs.push_back(
          cp_.start_send(ConstTensorView(v_hand, {kv_elements}, t), next, tag(g.cp, kBackward, step, kV), s));
    } else if (g.cp > 1) {
      // The owner's dk/dv went out at step 0 and that send completed then, so they can take the result now.
      reqs.push_back(cp_.start_recv(TensorView(dk.data(), {kv_elements}, t), prev, tag(g.cp, kBackward, step, kDK), s));
      reqs.push_back(cp_.start_recv(TensorView(dv.data(), {kv_elements}, t), prev, tag(g.cp, kBackward, step, kDV), s));
    }

    // Accumulators that arrive have been written by their owner's step 0; ours start empty.
    std::vector<char> kv_started(static_cast<std::size_t>(n_q), step == 0 ? 0 : 1);
    for (std::int64_t b = 0; b < g.B; ++b)
      for (int qc = 0; qc < 2; ++qc)
        for (int kc = 0; kc < 2; ++kc) {
          const int gq = shard_.chunk(qc), gk = g.owner_chunk(owner, kc);
          if (gk > gq) continue;
          const auto f = first.empty() ? first : first.subspan(static_cast<std::size_t>(g.q_row(b, qc)), g.C);
          if (before_documents(gk, g.C, f)) continue;
          const std::int64_t i = b * 2 + qc, j = b * 2 + kc, kr = g.q_row(b, kc) * kv_width;
          const kernels::AttentionBlockAccumulate accumulate{.dq = dq_started[static_cast<std::size_t>(i)] != 0,
                                                             .dkv = kv_started[static_cast<std::size_t>(j)] != 0};
          kernels::attention_block_bwd(
              TensorView(at(dq.data(), g.q_row(b, qc) * q_width, t), {1, g.C, g.H, g.D}, t),
              TensorView(at(dk_hand, kr, t), {1, g.C, g.KV, g.D}, t),
              TensorView(at(dv_hand, kr, t), {1, g.C, g.KV, g.D}, t), q_rows(dout.data(), b, qc),
              q_rows(q.data(), b, qc), ConstTensorView(at(k_hand, kr, t), {1, g.C, g.KV, g.D}, t),
              ConstTensorView(at(v_hand, kr, t), {1, g.C, g.KV, g.D}, t), lse_v(i), delta_v(i), g.block(gq, gk),
              accumulate, {static_cast<std::byte*>(scratch.data()), scratch.size()}, s, f);
          dq_started[static_cast<std::size_t>(i)] = 1;
          kv_started[static_cast<std::size_t>(j)] = 1;
          backward_pairs_ += g.H * document_pairs(gq, gk, g.C, f);
          poll(reqs);
        }
    // At step 0 each of our key chunks meets its own query chunk (the diagonal, never skipped: a query sees
    // itself, documents or not), and later accumulators arrive written, so this never fires; it keeps the
    // accumulators defined should the layout change.
    for (std::int64_t j = 0; j < n_q; ++j)
      if (!kv_started[static_cast<std::size_t>(j)]) {
        const std::int64_t kr = g.q_row(j / 2, static_cast<int>(j % 2)) * kv_width;
        std::memset(at(dk_hand, kr, t), 0, static_cast<std::size_t>(g.C * kv_width) * dtype_size(t));
        std::memset(at(dv_hand, kr, t), 0, static_cast<std::size_t>(g.C * kv_width) * dtype_size(t));
      }
    if (g.cp > 1) {
      reqs.push_back(
          cp_.start_send(ConstTensorView(dk_hand, {kv_elements}, t), next, tag(g.cp, kBackward, step, kDK), s));
      reqs.push_back(
          cp_.start_send(ConstTensorView(dv_hand, {kv_elements}, t), next, tag(g.cp, kBackward, step, kDV), s));
    }
    wait_all(reqs);
    if (step + 1 < g.cp) {
      k_hand = slot[sl][kK].data();
      v_hand = slot[sl][kV].data();
      dk_hand = slot[sl][kDK].data();
      dv_hand = slot[sl][kDV].data();
    }
  }
  for (std::int64_t i = 0; i < n_q; ++i)
    if (!dq_started[static_cast<std::size_t>(i)])
      std::memset(at(dq.data(), g.q_row(i / 2, static_cast<int>(i % 2)) * q_width, t), 0,
                  static_cast<std::size_t>(g.C * q_width) * dtype_size(t));
}

}  // namespace hzp::workloads
