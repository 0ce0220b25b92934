// The tensor-parallel collectives of the Llama decoder per unit and micro-batch (llama.hpp,
// llama_tensor_parallel_calls), written beside the code that issues them (llama_ends.cpp, llama_block.cpp,
// llama_model.cpp's sum_partial / gather_rows / norm_backward) so the plan needs no second description of the
// model. N = micro_batch_size · seq_len / cp tokens (a context-parallel rank's share), d = hidden, R = N / tp rows
// under sequence parallelism.
//   embedding  forward: its vocabulary rows' partial lookup summed (all-reduce N·d, or reduce-scatter to rows);
//              backward: under sequence parallelism the output gradient's rows all-gathered.
//   block      forward: two row-parallel sums (wo, w_down), and under sequence parallelism two all-gathers of
//              the normed rows; backward: two column-parallel input-gradient sums, under sequence parallelism
//              two all-gathers of the output gradients and the two norm weights' gradients all-reduced;
//              recompute repeats the forward's collectives except the MLP's output sum (not rebuilt).
//   head       forward: under sequence parallelism the normed rows all-gathered; the vocabulary-parallel
//              softmax's row maxima (MAX) and its sums of exponentials with the target logits (one buffer of
//              2N); backward: recompute's all-gather (the statistics are kept), the input gradient's sum, and
//              under sequence parallelism the final norm's weight gradient.
#include "hzp/core/error.hpp"
#include "hzp/workloads/llama.hpp"

namespace hzp::workloads {

std::vector<TensorParallelCall> llama_tensor_parallel_calls(const LlamaConfig& config, int unit, bool backward,
                                                            const TensorParallelRun& run) {
  std::vector<TensorParallelCall> out;
  if (run.tp <= 1) return out;
  const std::int64_t n = run.micro_batch_size * config.seq_len / run.cp, d = config.hidden, rows = n / run.tp;
  const DType act = activation_dtype(run.precision), stat = run.precision == Precision::fp64 ? DType::f64 : DType::f32;
  const DType grad = grad_dtype(run.precision);
  const bool sp = run.sequence_parallel;
  const int head = static_cast<int>(config.layers) + 1;
  HZP_CHECK(unit >= 0 && unit <= head, "llama_tensor_parallel_calls: unit ", unit, " of ", head + 1);
  auto add = [&](coll::CollOp op, std::int64_t elements, DType t, std::int64_t times, const char* what) {
    if (times > 0) out.push_back({op, elements, t, times, what});
  };
  // A partial [N, d] made whole: on every token, or reduce-scattered to the rank's rows.
  auto sum = [&](std::int64_t times, const char* what) {
    add(sp ? coll::CollOp::reduce_scatter : coll::CollOp::all_reduce, n * d, act, times, what);
  };
  auto gather = [&](std::int64_t times, const char* what) {
    if (sp) add(coll::CollOp::all_gather, rows * d, act, times, what);
  };
  auto norm_weights = [&](std::int64_t times) {
    if (sp) add(coll::CollOp::all_reduce, d, grad, times, "norm weight gradients (sequence shards)");
  };
  if (unit == 0) {
    if (!backward)
      sum(1, "vocabulary-parallel embedding lookup");
    else
      gather(1, "embedding output gradient rows");
  } else if (unit < head) {
    if (!backward) {
      gather(2, "normed rows before the column-parallel matmuls");
      sum(2, "row-parallel outputs");
    } else {
      if (run.recompute) {
        gather(2, "recompute: normed rows");
        sum(1, "recompute: attention output");
      }
      gather(2, "output gradients before the row-parallel matmuls");
      sum(2, "column-parallel input gradients");
      norm_weights(2);
    }
  } else {
    if (!backward) {
      gather(1, "final normed rows");
      add(coll::CollOp::all_reduce, n, stat, 1, "vocabulary-parallel softmax: row maxima (max)");
      add(coll::CollOp::all_reduce, 2 * n, stat, 1, "vocabulary-parallel softmax: sums of exponentials, target logits");
    } else {
      if (run.recompute) gather(1, "recompute: final normed rows");
      sum(1, "LM head input gradient");
      norm_weights(1);
    }
  }
  return out;
}

RingAttentionMessages llama_context_parallel_messages(const LlamaConfig& config, int unit, bool backward,
                                                      const TensorParallelRun& run) {
  const int head = static_cast<int>(config.layers) + 1;
  HZP_CHECK(unit >= 0 && unit <= head, "llama_context_parallel_messages: unit ", unit, " of ", head + 1);
  RingAttentionMessages m;
  m.dtype = activation_dtype(run.precision);
  if (run.cp <= 1 || unit == 0 || unit == head) return m;
  const ContextShard shard(config.seq_len, run.cp, 0);  // every rank of the ring sends the same
  const RingAttentionDims dims{run.micro_batch_size, config.heads / run.tp, config.kv_heads / run.tp,
                               config.resolved_head_dim()};
  m = RingAttention::messages(shard, dims, m.dtype, backward);
  if (backward && run.recompute) {  // the recomputed forward's pass first
    const RingAttentionMessages f = RingAttention::messages(shard, dims, m.dtype, false);
    m.sends += f.sends;
    m.steps += f.steps;
    m.posted_before += f.posted_before;
  }
  return m;
}

}  // namespace hzp::workloads
