// Phantom peers (docs/phantom.md): the Operation of a call with no peers, and the stand-in for their data, on host
// buffers or enqueued on a device stream (core's copy_bytes / zero_bytes, and sum_of_copies' kernel).
#include <algorithm>
#include <string>

#include "carried_algorithm_name.hpp"
#include "hzp/config.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "phantom.hpp"

namespace hzp::coll::detail {
namespace {

class PhantomOperation : public Operation {
 public:
  PhantomOperation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes, std::string_view algorithm)
      : own_(own), bytes_(bytes), algorithm_(algorithm) {}
  bool progress() override { return true; }
  Header known() const noexcept override { return own_; }
  std::array<std::uint64_t, kNumLinkLevels> bytes() const noexcept override { return bytes_; }
  bool bytes_modelled() const noexcept override { return true; }
  std::string_view algorithm() const noexcept override { return algorithm_; }
  std::string pending() const override { return "nothing pending (phantom peers)"; }
  void abandon() noexcept override {}

 private:
  Header own_;
  std::array<std::uint64_t, kNumLinkLevels> bytes_;
  std::string_view algorithm_;
};

// On a device stream: done once the stream has passed the stand-in and the hold. The hold's host functions point at
// it, so it lives as long as the operation, which the request keeps until the event says the stream is past it.
class PhantomStreamOperation final : public PhantomOperation {
 public:
  PhantomStreamOperation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes, std::string_view algorithm,
                         StreamRef s, std::unique_ptr<GpuLinkHold> hold)
      : PhantomOperation(own, bytes, algorithm), hold_(std::move(hold)), done_(s.device()) {
    done_.record(s);
  }
  ~PhantomStreamOperation() override {
    // Abandoned before the stream passed the hold (a failed call, a timeout): its host functions still point at it.
    // Waiting for the stream could hang on the very stall that timed out, so the hold is left allocated instead.
    if (hold_ && !finished_ && !done_.query()) (void)hold_.release();
  }
  bool progress() override { return finished_ = finished_ || done_.query(); }
  std::string pending() const override { return "the device stream has not reached the end of the phantom call"; }
  bool held_on_stream() const noexcept override { return hold_ != nullptr; }
  double held_s() const noexcept override { return hold_ ? hold_->slept_s() : 0.0; }

 private:
  std::unique_ptr<GpuLinkHold> hold_;
  Event done_;
  bool finished_ = false;
};

void copy(std::byte* dst, const std::byte* src, std::size_t bytes, Place at) {
  copy_bytes(dst, at.device, src, at.device, bytes, at.stream);
}

template <class T>
void scale(T* x, std::int64_t n, int p) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * p);
}

void scale_bf16(bf16* x, std::int64_t n, int p) {
  const float f = static_cast<float>(p);
  for (std::int64_t i = 0; i < n; ++i) x[i] = bf16(x[i].to_float() * f);
}

}  // namespace

std::unique_ptr<Operation> make_phantom_operation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes,
                                                  std::string_view modelled_algorithm) {
  return std::make_unique<PhantomOperation>(own, bytes, carried_algorithm_name(Carrier::phantom, modelled_algorithm));
}

std::unique_ptr<Operation> make_phantom_stream_operation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes,
                                                         std::string_view modelled_algorithm, StreamRef s,
                                                         std::unique_ptr<GpuLinkHold> hold) {
  return std::make_unique<PhantomStreamOperation>(
      own, bytes, carried_algorithm_name(Carrier::phantom, modelled_algorithm), s, std::move(hold));
}

// The accumulator's sum of p equal terms (rounded once for bf16).
void sum_of_copies(std::byte* x, std::int64_t n, DType dtype, int p, Place at) {
  if (p == 1 || n == 0) return;
  if (at.device.is_cuda()) return sum_of_copies_on_stream(x, n, dtype, p, at.stream);
  switch (dtype) {
    case DType::f32: scale(reinterpret_cast<float*>(x), n, p); break;
    case DType::f64: scale(reinterpret_cast<double*>(x), n, p); break;
    case DType::i32: scale(reinterpret_cast<std::int32_t*>(x), n, p); break;
    case DType::i64: scale(reinterpret_cast<std::int64_t*>(x), n, p); break;
    case DType::bf16: scale_bf16(reinterpret_cast<bf16*>(x), n, p); break;
    default: HZP_THROW(PreconditionError, "phantom reduction over ", dtype_name(dtype), ", which cannot be reduced");
  }
}

void phantom_all_gather(const std::byte* in, std::byte* out, std::size_t block_bytes, int rank, int p, Place at) {
  if (block_bytes == 0) return;
  // Block 0 first, then doubling: blocks [0, k) copied to [k, 2k), so log2(p) copies, not p - 1 (on a device
  // stream each copy is a launch). Sources and destinations never overlap; `in` may be block `rank` of out, which
  // block 0 has copied before anything writes there.
  if (in != out) copy(out, in, block_bytes, at);
  for (int have = 1; have < p;) {
    const int n = std::min(have, p - have);
    copy(out + block_bytes * static_cast<std::size_t>(have), out, block_bytes * static_cast<std::size_t>(n), at);
    have += n;
  }
  (void)rank;
}

void phantom_reduce_scatter(const std::byte* in, std::byte* out, std::int64_t n, const Reducer& red, int rank, int p,
                            Place at) {
  const std::size_t bytes = static_cast<std::size_t>(n) * red.elem();
  if (bytes == 0) return;
  copy(out, in + bytes * static_cast<std::size_t>(rank), bytes, at);
  if (red.op == ReduceOp::sum) sum_of_copies(out, n, red.dtype, p, at);
}

void phantom_all_reduce(std::byte* buf, std::int64_t n, const Reducer& red, int p, Place at) {
  if (red.op == ReduceOp::sum) sum_of_copies(buf, n, red.dtype, p, at);
}

void phantom_all_to_allv(const std::byte* in, std::span<const std::int64_t> send_counts, std::byte* out,
                         std::span<const std::int64_t> recv_counts, std::size_t elem, int rank, Place at) {
  std::size_t own_off = 0;
  for (int q = 0; q < rank; ++q) own_off += static_cast<std::size_t>(send_counts[static_cast<std::size_t>(q)]) * elem;
  const std::byte* own = in + own_off;
  const std::size_t have = static_cast<std::size_t>(send_counts[static_cast<std::size_t>(rank)]) * elem;
  std::size_t out_off = 0;
  for (std::size_t q = 0; q < recv_counts.size(); ++q) {
    const std::size_t want = static_cast<std::size_t>(recv_counts[q]) * elem;
    const std::size_t n = want < have ? want : have;
    // Every block, the own one included, is the own block (in and out do not overlap: start_all_to_allv checks).
    copy(out + out_off, own, n, at);
    if (want > n) zero_bytes(out + out_off + n, want - n, at.stream);
    out_off += want;
  }
}

void phantom_recv(std::byte* buf, std::size_t bytes, Place at) { zero_bytes(buf, bytes, at.stream); }

#if !HZP_HAVE_CUDA
void sum_of_copies_on_stream(void*, std::int64_t, DType, int, StreamRef s) {
  HZP_THROW(UnsupportedError, "a phantom sum on ", to_string(s.device()), " needs a build with CUDA");
}
#endif

}  // namespace hzp::coll::detail
