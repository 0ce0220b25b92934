// collectives.mpi_native = true: MPICH's own nonblocking collectives (MPI_Iallgather, ...), for
// comparison with our algorithms. The bytes per level cannot be observed inside MPICH, so they are
// modelled by replaying the algorithm we would have chosen for the same call, and marked so. bf16
// reductions are widened to fp32, reduced by MPI in fp32, and rounded back once. Join times travel
// in a companion MPI_Iallreduce(MAX) started right after the collective (same order on every rank).
#include "native_collectives.hpp"

#include <vector>

#include "mpi_check.hpp"

namespace hzp::coll::detail {
namespace {

MPI_Datatype reduce_type(DType acc) {
  switch (acc) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: break;
  }
  HZP_THROW(PreconditionError, "no MPI reduction type for ", dtype_name(acc));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

class NativeOperation final : public Operation {
 public:
  NativeOperation(CommState& st, const NativeCall& call, Header own, ScratchPool::Lease scratch,
                  std::array<std::uint64_t, kNumLinkLevels> modelled_bytes, std::string_view algorithm)
      : st_(st), call_(call), scratch_(std::move(scratch)), bytes_(modelled_bytes), algorithm_(algorithm) {
    header_in_ = own;
    header_out_ = own;
  }
  ~NativeOperation() override { abandon(); }

  void begin() {
    const Reducer& red = call_.red;
    const bool widen = call_.reduces && red.acc != red.dtype;
    std::byte* s = scratch_.data();
    const int p = st_.size;
    switch (call_.op) {
      case CollOp::all_gather: {
        const MPI_Count b = static_cast<MPI_Count>(call_.bytes);
        const std::byte* own = call_.out + static_cast<std::size_t>(b) * static_cast<std::size_t>(st_.rank);
        const void* send = call_.in == own ? MPI_IN_PLACE : static_cast<const void*>(call_.in);
        HZP_MPI_CHECK(MPI_Iallgather_c(send, b, MPI_BYTE, call_.out, b, MPI_BYTE, st_.comm, &reqs_[0]));
        break;
      }
      case CollOp::reduce_scatter: {
        const auto n = static_cast<std::size_t>(call_.count);
        const void* in = call_.in;
        void* out = call_.out;
        if (widen) {  // fp32 copies: [p*n input | n output]
          red.widen(s, call_.in, n * static_cast<std::size_t>(p));
          in = s;
          out = s + n * static_cast<std::size_t>(p) * red.acc_elem();
        }
        HZP_MPI_CHECK(MPI_Ireduce_scatter_block_c(in, out, static_cast<MPI_Count>(n), reduce_type(red.acc),
                                                  mpi_op(red.op), st_.comm, &reqs_[0]));
        break;
      }
      case CollOp::all_reduce: {
        const auto n = static_cast<std::size_t>(call_.count);
        void* buf = call_.out;
        if (widen) {
          red.widen(s, call_.out, n);
          buf = s;
        }
        HZP_MPI_CHECK(MPI_Iallreduce_c(MPI_IN_PLACE, buf, static_cast<MPI_Count>(n), reduce_type(red.acc),
                                       mpi_op(red.op), st_.comm, &reqs_[0]));
        break;
      }
      case CollOp::all_to_all:
      case CollOp::all_to_allv: {
        counts_.resize(4 * static_cast<std::size_t>(p));
        displs_.resize(2 * static_cast<std::size_t>(p));
        MPI_Aint so = 0, ro = 0;
        for (int q = 0; q < p; ++q) {
          counts_[q] = static_cast<MPI_Count>(call_.send_counts[q] * static_cast<std::int64_t>(call_.elem));
          counts_[p + q] = static_cast<MPI_Count>(call_.recv_counts[q] * static_cast<std::int64_t>(call_.elem));
          displs_[q] = so;
          displs_[p + q] = ro;
          so += static_cast<MPI_Aint>(counts_[q]);
          ro += static_cast<MPI_Aint>(counts_[p + q]);
        }
        HZP_MPI_CHECK(MPI_Ialltoallv_c(call_.in, counts_.data(), displs_.data(), MPI_BYTE, call_.out,
                                       counts_.data() + p, displs_.data() + p, MPI_BYTE, st_.comm, &reqs_[0]));
        break;
      }
      case CollOp::broadcast:
        HZP_MPI_CHECK(MPI_Ibcast_c(call_.out, static_cast<MPI_Count>(call_.bytes), MPI_BYTE, call_.root, st_.comm,
                                   &reqs_[0]));
        break;
      case CollOp::barrier:
        HZP_MPI_CHECK(MPI_Ibarrier(st_.comm, &reqs_[0]));
        break;
      default:
        HZP_THROW(PreconditionError, coll_op_name(call_.op), " has no native MPI form here");
    }
    HZP_MPI_CHECK(
        MPI_Iallreduce(&header_in_, &header_out_, 2, MPI_DOUBLE, MPI_MAX, st_.comm, &reqs_[1]));
  }

  bool progress() override {
    if (finished_) return true;
    int done = 0;
    HZP_MPI_CHECK(MPI_Testall(2, reqs_.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) return false;
    const Reducer& red = call_.red;
    if (call_.reduces && red.acc != red.dtype) {
      // The single rounding of bf16, after MPI reduced in fp32.
      const auto n = static_cast<std::size_t>(call_.count);
      const std::byte* s = scratch_.data();
      if (call_.op == CollOp::reduce_scatter)
        red.finish(call_.out, s + n * static_cast<std::size_t>(st_.size) * red.acc_elem(), n);
      else
        red.finish(call_.out, s, n);
    }
    finished_ = true;
    return true;
  }

  Header known() const noexcept override {
    Header h = header_in_;
    if (finished_) h.merge(header_out_);
    return h;
  }
  std::array<std::uint64_t, kNumLinkLevels> bytes() const noexcept override { return bytes_; }
  bool bytes_modelled() const noexcept override { return true; }
  std::string_view algorithm() const noexcept override { return algorithm_; }
  std::string pending() const override { return "native MPI collective still incomplete"; }
  void abandon() noexcept override {
    // Nonblocking collectives cannot be cancelled; release them so their completion is not awaited.
    for (MPI_Request& r : reqs_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }

 private:
  CommState& st_;
  NativeCall call_;
  ScratchPool::Lease scratch_;
  std::array<std::uint64_t, kNumLinkLevels> bytes_;
  std::string_view algorithm_;
  std::array<MPI_Request, 2> reqs_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  Header header_in_{}, header_out_{};
  std::vector<MPI_Count> counts_;
  std::vector<MPI_Aint> displs_;
  bool finished_ = false;
};

}  // namespace

std::size_t native_scratch_bytes(const NativeCall& call, int p) {
  if (!call.reduces || call.red.acc == call.red.dtype) return 0;
  const auto n = static_cast<std::size_t>(call.count);
  return call.op == CollOp::reduce_scatter ? n * (static_cast<std::size_t>(p) + 1) * call.red.acc_elem()
                                           : n * call.red.acc_elem();
}

std::unique_ptr<Operation> make_native_operation(CommState& st, const NativeCall& call, Header own,
                                                 ScratchPool::Lease scratch,
                                                 std::array<std::uint64_t, kNumLinkLevels> modelled_bytes,
                                                 std::string_view algorithm) {
  auto op = std::make_unique<NativeOperation>(st, call, own, std::move(scratch), modelled_bytes, algorithm);
  op->begin();
  return op;
}

}  // namespace hzp::coll::detail
