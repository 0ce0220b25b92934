// The fused attention twin (cuda_twins.hpp): cuDNN's scaled-dot-product attention, forward and backward,
// built through the cuDNN frontend's graph API (header-only; scripts/bootstrap fetches its headers). bf16
// q/k/v/out and gradients, fp32 softmax statistics, causal (top-left diagonal: row t sees keys <= t),
// grouped-query heads read in place. The layouts are the launchers' own: [B, T, H, D] is given to cuDNN as
// the logical [B, H, T, D] with strides (T·H·D, D, H·D, 1), and cuDNN's statistics [B, H, T, 1] (max +
// ln Σexp of the scaled scores: the lse attention.hpp defines) are the lse buffer itself, so nothing is
// copied or transposed.
//
// cuDNN is opened with dlopen on first use (the frontend's dynamic-loading mode), as cuBLASLt is: a process
// that never runs fused attention does not load it. Graphs are built once per shape and thread, with the
// handle of that thread (cuDNN handles are not shared between threads), and executed on the caller's stream.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common/cuda_twins.hpp"
#include "hzp/core/error.hpp"

// The frontend's dynamic-loading mode reads cuDNN's symbols from this handle; we set it in load_cudnn().
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace hzp::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the graphs' variant packs.
enum : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::string cudnn_soname() { return "libcudnn.so." + std::to_string(CUDNN_MAJOR); }

// "" when libcudnn is loaded (once per process), else why not.
const std::string& load_cudnn() {
  static const std::string error = [] {
    const std::string name = cudnn_soname();
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
      return "cannot load " + name + " (" + dlerror() + "). Fix: install cuDNN " + std::to_string(CUDNN_MAJOR) +
             " (the CUDA toolkit's, or the nvidia-cudnn-cu" + std::to_string(CUDA_VERSION / 1000) +
             " Python package's lib folder) on LD_LIBRARY_PATH, or model.attention = unfused";
    fe::cudnn_dlhandle = lib;  // kept open for good
    return std::string();
  }();
  return error;
}

std::string message(fe::error_t e) { return e.get_message(); }

// This thread's cuDNN handle (created on first use, deliberately never destroyed: destroying it from a
// thread_local destructor can run after the CUDA runtime has shut down at process exit).
cudnnHandle_t thread_handle() {
  thread_local cudnnHandle_t handle = [] {
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t st = fe::detail::create_handle(&h);
    if (st != CUDNN_STATUS_SUCCESS)
      HZP_THROW(CudaError, "fused attention: cudnnCreate failed (status ", static_cast<int>(st),
                "). Fix: check that a GPU is visible, or model.attention = unfused");
    return h;
  }();
  return handle;
}

std::vector<std::int64_t> rows_strides(std::int64_t t, std::int64_t heads, std::int64_t d) {
  return {t * heads * d, d, heads * d, 1};  // [B, T, heads, D] memory as the logical [B, heads, T, D]
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, std::int64_t uid,
                                                    std::int64_t b, std::int64_t heads, std::int64_t t,
                                                    std::int64_t d) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({b, heads, t, d}).set_stride(
      rows_strides(t, heads, d)));
}

void set_rows_output(const std::shared_ptr<fe::graph::Tensor_attributes>& x, std::int64_t uid, std::int64_t b,
                     std::int64_t heads, std::int64_t t, std::int64_t d) {
  x->set_output(true).set_uid(uid).set_dim({b, heads, t, d}).set_stride(rows_strides(t, heads, d));
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
  std::string error;  // non-empty: cuDNN cannot run this shape here (the reason)
};

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

void describe_forward(fe::graph::Graph& g, const AttentionDims& d) {
  const auto q = input(g, "q", kQ, d.batch, d.heads, d.seq, d.head_dim);
  const auto k = input(g, "k", kK, d.batch, d.kv_heads, d.seq, d.head_dim);
  const auto v = input(g, "v", kV, d.batch, d.kv_heads, d.seq, d.head_dim);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("attention_fwd")
                  .set_generate_stats(true)
                  .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                  .set_diagonal_band_right_bound(0)
                  .set_attn_scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim))));
  auto [o, stats] = g.sdpa(q, k, v, opts);
  set_rows_output(o, kO, d.batch, d.heads, d.seq, d.head_dim);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({d.batch, d.heads, d.seq, 1})
      .set_stride({d.heads * d.seq, d.seq, 1, 1});
}

void describe_backward(fe::graph::Graph& g, const AttentionDims& d) {
  const auto q = input(g, "q", kQ, d.batch, d.heads, d.seq, d.head_dim);
  const auto k = input(g, "k", kK, d.batch, d.kv_heads, d.seq, d.head_dim);
  const auto v = input(g, "v", kV, d.batch, d.kv_heads, d.seq, d.head_dim);
  const auto o = input(g, "o", kO, d.batch, d.heads, d.seq, d.head_dim);
  const auto dout = input(g, "dO", kDO, d.batch, d.heads, d.seq, d.head_dim);
  const auto stats = g.tensor(fe::graph::Tensor_attributes()
                                  .set_name("stats")
                                  .set_uid(kStats)
                                  .set_dim({d.batch, d.heads, d.seq, 1})
                                  .set_stride({d.heads * d.seq, d.seq, 1, 1})
                                  .set_data_type(fe::DataType_t::FLOAT));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("attention_bwd")
                  .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                  .set_diagonal_band_right_bound(0)
                  .set_attn_scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim))));
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dout, stats, opts);
  set_rows_output(dq, kDQ, d.batch, d.heads, d.seq, d.head_dim);
  set_rows_output(dk, kDK, d.batch, d.kv_heads, d.seq, d.head_dim);
  set_rows_output(dv, kDV, d.batch, d.kv_heads, d.seq, d.head_dim);
}

Built build(const AttentionDims& d, bool backward) {
  Built b;
  if (const std::string& e = load_cudnn(); !e.empty()) {
    b.error = e;
    return b;
  }
  try {
    b.graph = new_graph();
    (backward ? describe_backward : describe_forward)(*b.graph, d);
    const cudnnHandle_t h = thread_handle();
    // validate → operation graph → heuristics' plans → support → build: the first failing stage's message.
    fe::error_t e = b.graph->validate();
    if (e.is_good()) e = b.graph->build_operation_graph(h);
    if (e.is_good()) e = b.graph->create_execution_plans({fe::HeurMode_t::A});
    if (e.is_good()) e = b.graph->check_support(h);
    if (e.is_good()) e = b.graph->build_plans(h);
    if (e.is_good()) e = b.graph->get_workspace_size(b.workspace);
    if (e.is_bad())
      b.error = "cuDNN " + std::to_string(fe::detail::get_backend_version()) + " does not support the " +
                (backward ? "backward" : "forward") + " at B = " + std::to_string(d.batch) + ", T = " +
                std::to_string(d.seq) + ", heads = " + std::to_string(d.heads) + "/" + std::to_string(d.kv_heads) +
                ", head_dim = " + std::to_string(d.head_dim) + ": " + message(e);
  } catch (const std::exception& x) {  // no handle (no GPU), or a library the frontend opens itself is missing
    b.error = x.what();
  }
  if (!b.error.empty()) b.graph.reset();
  return b;
}

const Built& graph_for(const AttentionDims& d, bool backward) {
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>;
  thread_local std::map<Key, Built> cache;
  const Key key{d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, backward};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build(d, backward)).first;
  return it->second;
}

const Built& runnable(const AttentionDims& d, bool backward) {
  const Built& b = graph_for(d, backward);
  if (!b.error.empty()) HZP_THROW(UnsupportedError, "fused attention: ", b.error);
  return b;
}

void* ptr(ConstTensorView t) { return const_cast<void*>(t.data()); }

void execute(const Built& b, std::unordered_map<std::int64_t, void*>& pack, std::span<std::byte> workspace,
             StreamRef s, const char* what) {
  HZP_CHECK(workspace.size() >= static_cast<std::size_t>(b.workspace), what, ": workspace of ", workspace.size(),
            " bytes, cuDNN's plan needs ", b.workspace);
  const cudnnHandle_t h = thread_handle();
  const cudnnStatus_t st = fe::detail::set_stream(h, static_cast<cudaStream_t>(s.native()));
  if (st != CUDNN_STATUS_SUCCESS) HZP_THROW(CudaError, what, ": cudnnSetStream failed (status ", static_cast<int>(st), ")");
  const fe::error_t e = b.graph->execute(h, pack, b.workspace > 0 ? workspace.data() : nullptr);
  if (e.is_bad()) HZP_THROW(CudaError, what, ": cuDNN's execute failed: ", message(e));
}

}  // namespace

std::string fused_attention_unavailable(const AttentionDims& d, DType dtype) {
  if (dtype != DType::bf16)
    return "cuDNN's fused attention takes bf16 activations; these are " + std::string(dtype_name(dtype)) +
           " (train.precision = bf16-mixed uses it)";
  if (d.head_dim % 8 != 0 || d.head_dim > 256)
    return "cuDNN's fused attention takes head_dim a multiple of 8 up to 256; head_dim = " +
           std::to_string(d.head_dim);
  if (const std::string& e = graph_for(d, false).error; !e.empty()) return e;
  return graph_for(d, true).error;
}

std::size_t fused_attention_fwd_workspace_bytes(const AttentionDims& d, DType) {
  return static_cast<std::size_t>(runnable(d, false).workspace);
}

std::size_t fused_attention_bwd_workspace_bytes(const AttentionDims& d, DType) {
  return static_cast<std::size_t>(runnable(d, true).workspace);
}

void fused_attention_fwd(TensorView out, TensorView lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                         const AttentionDims& d, std::span<std::byte> workspace, StreamRef s) {
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, ptr(q)}, {kK, ptr(k)}, {kV, ptr(v)}, {kO, out.data()}, {kStats, lse.data()}};
  execute(runnable(d, false), pack, workspace, s, "attention_fwd (fused)");
}

void fused_attention_bwd(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, ConstTensorView out, ConstTensorView lse,
                         const AttentionDims& d, std::span<std::byte> workspace, StreamRef s) {
  std::unordered_map<std::int64_t, void*> pack{{kQ, ptr(q)},     {kK, ptr(k)},        {kV, ptr(v)},
                                               {kO, ptr(out)},   {kDO, ptr(dout)},    {kStats, ptr(lse)},
                                               {kDQ, dq.data()}, {kDK, dk.data()},    {kDV, dv.data()}};
  execute(runnable(d, true), pack, workspace, s, "attention_bwd (fused)");
}

}  // namespace hzp::kernels::cuda
