// The NCCL backend of a build without NCCL (or without CUDA): every entry point throws UnsupportedError
// naming the fix, so callers compile and link unchanged.
#include "hzp/collectives/nccl_communicator.hpp"
#include "hzp/config.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll {
namespace {
[[noreturn]] void absent() {
  HZP_THROW(UnsupportedError, "the NCCL communicator needs a build with CUDA and NCCL; this one has CUDA ",
            HZP_HAVE_CUDA ? "on" : "off", " and NCCL off. Fix: install NCCL (nccl.h, libnccl) and reconfigure, "
            "or use collectives.backend = mpi");
}
}  // namespace

struct NcclCommunicator::State {};

bool nccl_available() noexcept { return false; }
std::string nccl_version() { return "none"; }
NcclCommunicator::NcclCommunicator(Bootstrap&, NcclCommConfig) { absent(); }
NcclCommunicator::NcclCommunicator(std::unique_ptr<State>) { absent(); }
NcclCommunicator::~NcclCommunicator() = default;
int NcclCommunicator::rank() const noexcept { return 0; }
int NcclCommunicator::size() const noexcept { return 0; }
const std::string& NcclCommunicator::name() const noexcept {
  static const std::string n = "nccl (absent)";
  return n;
}
Device NcclCommunicator::device() const noexcept { return Device::cpu(); }
CommCounters& NcclCommunicator::counters() noexcept { absent(); }
StreamRef NcclCommunicator::comm_stream() const noexcept { return StreamRef::host(); }
Request NcclCommunicator::start_all_gather(ConstTensorView, TensorView, StreamRef) { absent(); }
Request NcclCommunicator::start_reduce_scatter(ConstTensorView, TensorView, ReduceOp, StreamRef) { absent(); }
Request NcclCommunicator::start_all_reduce(TensorView, ReduceOp, StreamRef) { absent(); }
Request NcclCommunicator::start_all_to_all(ConstTensorView, TensorView, StreamRef) { absent(); }
Request NcclCommunicator::start_all_to_allv(ConstTensorView, std::span<const std::int64_t>, TensorView,
                                            std::span<const std::int64_t>, StreamRef) {
  absent();
}
Request NcclCommunicator::start_broadcast(TensorView, int, StreamRef) { absent(); }
Request NcclCommunicator::start_send(ConstTensorView, int, int, StreamRef) { absent(); }
Request NcclCommunicator::start_recv(TensorView, int, int, StreamRef) { absent(); }
Request NcclCommunicator::start_p2p_batch(std::span<const SendOp>, std::span<const RecvOp>, StreamRef) { absent(); }
Request NcclCommunicator::start_barrier() { absent(); }
std::unique_ptr<Communicator> NcclCommunicator::split(int, int, std::string, bool) { absent(); }
std::unique_ptr<Communicator> NcclCommunicator::duplicate(std::string, bool) { absent(); }

#if !HZP_HAVE_CUDA
void GpuLinkHold::start(StreamRef, std::function<double(double)>) { absent(); }
void GpuLinkHold::finish(StreamRef, double) { absent(); }
void GpuLinkHold::stamp(void*) {}
void GpuLinkHold::sleep(void*) {}
#endif

}  // namespace hzp::coll
