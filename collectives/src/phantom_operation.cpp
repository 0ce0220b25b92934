// Phantom peers (docs/phantom.md): the Operation of a call with no peers, and the stand-in for their data.
#include <cstring>
#include <string>

#include "carried_algorithm_name.hpp"
#include "hzp/core/error.hpp"
#include "phantom.hpp"

namespace hzp::coll::detail {
namespace {

class PhantomOperation final : public Operation {
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

template <class T>
void scale(T* x, std::int64_t n, int p) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * p);
}

void scale_bf16(bf16* x, std::int64_t n, int p) {
  const float f = static_cast<float>(p);
  for (std::int64_t i = 0; i < n; ++i) x[i] = bf16(x[i].to_float() * f);
}

// buf = sum of p copies of buf (the accumulator's sum of p equal terms, rounded once for bf16).
void sum_of_copies(std::byte* buf, std::int64_t n, DType dtype, int p) {
  if (p == 1 || n == 0) return;
  switch (dtype) {
    case DType::f32: scale(reinterpret_cast<float*>(buf), n, p); break;
    case DType::f64: scale(reinterpret_cast<double*>(buf), n, p); break;
    case DType::i32: scale(reinterpret_cast<std::int32_t*>(buf), n, p); break;
    case DType::i64: scale(reinterpret_cast<std::int64_t*>(buf), n, p); break;
    case DType::bf16: scale_bf16(reinterpret_cast<bf16*>(buf), n, p); break;
    default: HZP_THROW(PreconditionError, "phantom reduction over ", dtype_name(dtype), ", which cannot be reduced");
  }
}

}  // namespace

std::unique_ptr<Operation> make_phantom_operation(Header own, std::array<std::uint64_t, kNumLinkLevels> bytes,
                                                  std::string_view modelled_algorithm) {
  return std::make_unique<PhantomOperation>(own, bytes, carried_algorithm_name(Carrier::phantom, modelled_algorithm));
}

void phantom_all_gather(const std::byte* in, std::byte* out, std::size_t block_bytes, int rank, int p) {
  if (block_bytes == 0) return;
  std::byte* own = out + block_bytes * static_cast<std::size_t>(rank);
  if (in != own) std::memcpy(own, in, block_bytes);
  for (int q = 0; q < p; ++q)
    if (q != rank) std::memcpy(out + block_bytes * static_cast<std::size_t>(q), own, block_bytes);
}

void phantom_reduce_scatter(const std::byte* in, std::byte* out, std::int64_t n, const Reducer& red, int rank, int p) {
  const std::size_t bytes = static_cast<std::size_t>(n) * red.elem();
  if (bytes == 0) return;
  std::memcpy(out, in + bytes * static_cast<std::size_t>(rank), bytes);
  if (red.op == ReduceOp::sum) sum_of_copies(out, n, red.dtype, p);
}

void phantom_all_reduce(std::byte* buf, std::int64_t n, const Reducer& red, int p) {
  if (red.op == ReduceOp::sum) sum_of_copies(buf, n, red.dtype, p);
}

void phantom_all_to_allv(const std::byte* in, std::span<const std::int64_t> send_counts, std::byte* out,
                         std::span<const std::int64_t> recv_counts, std::size_t elem, int rank) {
  std::size_t own_off = 0;
  for (int q = 0; q < rank; ++q) own_off += static_cast<std::size_t>(send_counts[static_cast<std::size_t>(q)]) * elem;
  const std::byte* own = in + own_off;
  const std::size_t have = static_cast<std::size_t>(send_counts[static_cast<std::size_t>(rank)]) * elem;
  std::size_t out_off = 0;
  for (std::size_t q = 0; q < recv_counts.size(); ++q) {
    const std::size_t want = static_cast<std::size_t>(recv_counts[q]) * elem;
    const std::size_t copy = want < have ? want : have;
    // Every block, the own one included, is the own block (in and out do not overlap: start_all_to_allv checks).
    if (copy > 0) std::memcpy(out + out_off, own, copy);
    if (want > copy) std::memset(out + out_off + copy, 0, want - copy);
    out_off += want;
  }
}

}  // namespace hzp::coll::detail
