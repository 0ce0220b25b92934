// Ring attention for context parallelism: causal grouped-query attention of a rank's ContextShard tokens over
// every key of their sequences, the keys and values travelling around the cp group one neighbour at a time
// while the block in hand is computed (online softmax forward, blocked backward whose dK/dV accumulators travel
// with their keys and end up back at their owner). A self-contained component the Llama model will call in
// place of attention_fwd/attention_bwd; its message schedule is exposed for the plan (messages()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/workloads/context_shard.hpp"
#include "hzp/workloads/ring_exchange_lane.hpp"

namespace hzp::coll {
class Communicator;
class StreamOrderedRequests;
}

namespace hzp::workloads {

/// The attention sizes, as kernels::AttentionDims without the sequence (which the shard gives). Query head h
/// reads key/value head h / (heads / kv_heads); scores are scaled by 1/sqrt(head_dim).
struct RingAttentionDims {
  std::int64_t batch = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
};

/// What one rank sends on the cp communicator in one pass: `sends` point-to-point messages of `elements`
/// elements of `dtype` each, and as many receives of the same size. The ring is symmetric, so every rank of
/// the group sends and receives the same.
struct RingAttentionMessages {
  std::int64_t sends = 0;
  std::int64_t elements = 0;  ///< per message: one K, V, dK or dV block, batch · local_len · kv_heads · head_dim
  DType dtype = DType::f32;
  /// How the sends overlap the attention (for the simulator): the passes' steps, each computing one block
  /// (cp per pass), and the sends posted before a step's block (K and V passed on, 2 in each of a pass's first
  /// cp − 1 steps); the rest (backward's dK and dV, 2 in every step) go out after the step's block.
  std::int64_t steps = 0;
  std::int64_t posted_before = 0;

  std::int64_t message_bytes() const noexcept { return elements * static_cast<std::int64_t>(dtype_size(dtype)); }
  std::int64_t bytes() const noexcept { return sends * message_bytes(); }
};

/// Layouts (row-major, contiguous, L = shard.local_len(), the rank's tokens of each sequence in local order:
/// its early chunk, then its late one), the same as attention_fwd's with seq = L:
///   q, out, dout, dq : [B·L, H·D] or [B, L, H, D]
///   k, v, dk, dv     : [B·L, KV·D] or [B, L, KV, D]
///   lse              : [B, H, L], the accumulation dtype (fp64 for f64, fp32 for f32 and bf16)
/// q, k, v, out and the gradients share the dtype given at construction (f64, f32 or bf16).
///
/// Message schedule (step s = 0 .. cp−1, the block in hand belongs to owner (rank − s) mod cp; every message
/// goes to rank + 1 and comes from rank − 1, mod cp):
///   forward   steps 0 .. cp−2 pass K and V on: 2·(cp − 1) messages;
///   backward  steps 0 .. cp−2 pass K, V and the owner's dK, dV accumulators on, and after the last step the
///             accumulators (complete now) take one more hop home: 4·(cp − 1) + 2 messages;
/// each of B·L·KV·D elements of the dtype (none at all when cp == 1). Tags: (pass·cp + step)·4 + tensor with
/// pass 0 forward / 1 backward and tensor K, V, dK, dV = 0..3, so tags 0 .. 8·cp − 1 of the communicator are
/// used; each pass completes every message it starts before it returns (given a keeper that keeps, it hands them to
/// the keeper instead, which completes them later). Each step's messages go out as
/// point-to-point batches (Communicator::start_p2p_batch): K and V before the step's blocks, and in backward the
/// dK/dV accumulators (this rank's to next, prev's in) after them, so no rank's receive waits on a send queued
/// behind it (NCCL).
///
/// Stream semantics: every buffer (the tensors, the allocator's memory) lives in the stream's memory. On the
/// host the calls are synchronous and each step's messages complete before the next step; they move while the
/// step's blocks are computed (the compute thread polls them between blocks). On a CUDA stream the block kernels,
/// copies and fills are enqueued on it and the exchanges on a stream of the ring's own (a RingExchangeLane): each
/// batch is ordered after an event recorded on the compute stream where it is issued (its send buffers written,
/// its receive slots read for the last time by the blocks before it: two slots per tensor, as on the host), and
/// the compute stream waits for the lane's event only right before the blocks that read what arrived (timed as
/// an at-use stall by the calling thread's device stall clock, coll::time_device_wait), so the next block's
/// transfer overlaps the block in hand. Given a request keeper that keeps (coll::StreamOrderedRequests, kept: the
/// step driver's on a CUDA stream), the pass hands its exchanges' requests to it and the host does not wait for
/// them at all: the keeper completes them at the step's end (their counters and deadlines); the compute stream has
/// waited for the lane's last event before the pass returns, so every later user of the ring's buffers is ordered
/// after the transfers. Without one (or with one that waits at once) the host waits once per pass, at its end, for
/// the pass's exchanges (their counters and deadlines), not per step. Buffers come from the allocator
/// for the duration of a call: message buffers tagged comm, the online-softmax state and the backward's row
/// statistics tagged workspace. Nothing of this class lives from forward to backward (out and lse, which do, are
/// the caller's), so it allocates no activation.
/// Thread safety: one thread at a time, as the communicator.
class RingAttention {
 public:
  /// `cp` (rank = shard.rank(), size = shard.cp()) and `alloc` must outlive the object. PreconditionError
  /// naming the values for a communicator that does not match the shard, non-positive sizes, heads not a
  /// multiple of kv_heads, or a dtype other than f64, f32, bf16. `lane` (may be null; must outlive the object and
  /// be on the stream's device): where the exchanges go on a CUDA stream; null makes one for this object at its
  /// first pass on a CUDA stream. Unused on the host. `requests` (may be null; must outlive the object): the step's
  /// request keeper (MicroBatchContext::requests). One that keeps receives every exchange of a pass on its stream
  /// instead of the host waiting at the pass's end; one that waits at once, or none, leaves the passes as they are.
  /// A keeper that keeps on the host stream (a test's) is accepted over phantom peers only, whose calls complete
  /// as they start: a real peer's host transfer moves only inside the waits it would skip (PreconditionError).
  RingAttention(coll::Communicator& cp, const ContextShard& shard, RingAttentionDims dims, DType dtype,
                CachingAllocator& alloc, RingExchangeLane* lane = nullptr,
                coll::StreamOrderedRequests* requests = nullptr);

  /// out, lse = causal attention of every local query over all keys of its sequence at global positions.
  /// first (document packing; empty: none): int32 [B·L], each local query's document start as a GLOBAL position
  /// (MicroBatchContext::document_first under context parallelism); the query then sees keys [first, position]
  /// only, and a key block wholly before the query chunk's documents is skipped (no kernel call, no pairs).
  /// first is host memory (the skips are decided on the host); stream_first the same starts in the stream's
  /// memory, for the kernels (MicroBatchContext::stream_document_first): needed on a CUDA stream, empty = first.
  void forward(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v, StreamRef s,
               std::span<const std::int32_t> first = {}, std::span<const std::int32_t> stream_first = {});
  /// Gradients of forward: dq of the local queries; dk, dv of the local keys summed over the queries of
  /// every rank. All three are overwritten. out, lse, first and stream_first as forward had them.
  void backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q, ConstTensorView k,
                ConstTensorView v, ConstTensorView out, ConstTensorView lse, StreamRef s,
                std::span<const std::int32_t> first = {}, std::span<const std::int32_t> stream_first = {});

  /// The schedule above, for the plan: messages of one forward (backward = false) or one backward.
  static RingAttentionMessages messages(const ContextShard& shard, const RingAttentionDims& dims, DType dtype,
                                        bool backward);
  /// The (query, key) pairs one rank's pass computes, summed over batch and query heads: the causally visible
  /// ones, B·H·T·(T + 1) / (2·cp) on every rank (the shard's early-with-late chunks balance the work).
  static std::int64_t visible_pairs(const ContextShard& shard, const RingAttentionDims& dims);

  /// The pairs the last forward / backward actually computed (counted as they are handed to the kernels).
  std::int64_t forward_pairs() const noexcept { return forward_pairs_; }
  std::int64_t backward_pairs() const noexcept { return backward_pairs_; }

  const ContextShard& shard() const noexcept { return shard_; }
  const RingAttentionDims& dims() const noexcept { return dims_; }
  DType dtype() const noexcept { return dtype_; }

 private:
  void check_activation(const char* name, const ConstTensorView& t, bool kv, Device device) const;
  void check_lse(const ConstTensorView& t, Device device) const;
  void check_stream(StreamRef s) const;
  /// The lane a pass on `s` issues its exchanges on: none on the host or without exchanges (cp = 1).
  RingExchangeLane* lane_for(StreamRef s);
  /// The keeper a pass on `s` hands its requests to: requests_ when it keeps (checked against `s` and the group),
  /// else null (the host waits at the pass's end).
  coll::StreamOrderedRequests* keeper_for(StreamRef s) const;
  void check_first(std::span<const std::int32_t> first, std::span<const std::int32_t> stream_first, StreamRef s) const;
  /// The checks both passes make of the stream, the document starts and the forward's tensors; returns the starts
  /// the kernels read (stream_first, or first on the host).
  std::span<const std::int32_t> check_pass(ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out,
                                           ConstTensorView lse, StreamRef s, std::span<const std::int32_t> first,
                                           std::span<const std::int32_t> stream_first) const;

  coll::Communicator& cp_;
  ContextShard shard_;
  RingAttentionDims dims_;
  DType dtype_;
  CachingAllocator& alloc_;
  RingExchangeLane* lane_;
  std::unique_ptr<RingExchangeLane> own_lane_;  // when no lane was given
  coll::StreamOrderedRequests* requests_;
  std::int64_t forward_pairs_ = 0;
  std::int64_t backward_pairs_ = 0;
};

}  // namespace hzp::workloads
