// NcclCommunicator (nccl_communicator.hpp): setup through the Bootstrap, NCCL calls on an owned
// communication stream ordered against the caller's stream with events, requests completed by polling
// an event and NCCL's async error under a deadline, per-call counters with ring-model bytes, and the
// GPU link emulation hold. The NCCL communicator is created non-blocking (config.blocking = 0) so that
// initialisation and every enqueue can be polled under the deadline instead of hanging.
#include "hzp/collectives/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/cuda_check.hpp"

namespace hzp::coll {
namespace {

const char* describe_nccl(ncclResult_t r) { return ncclGetErrorString(r); }
#define HZP_NCCL_CHECK(stmt) \
  HZP_CHECK_CALL(stmt, ::hzp::NcclError, hzp_status == ncclSuccess || hzp_status == ncclInProgress, describe_nccl)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: HZP_THROW(PreconditionError, "nccl: dtype ", dtype_name(t), " has no NCCL type");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

std::uint64_t this_thread_id() noexcept { return static_cast<std::uint64_t>(syscall(SYS_gettid)); }

}  // namespace

bool nccl_available() noexcept { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1;
  NcclCommConfig config;
  Stream stream;
  Event ready;
  std::shared_ptr<CommCounters> counters;
  int group = -1;
  bool spans_nodes = false;
  std::uint64_t seq = 0;
  bool poisoned = false;
  void* scratch = nullptr;  // 4 device bytes for the barrier's all-reduce
  void* staging = nullptr;  // device copy of host buffers (stage_host), grown on demand
  std::size_t staging_bytes = 0;

  State(const NcclCommConfig& c, std::shared_ptr<CommCounters> ctr)
      : config(c), stream(Device::cuda(c.device)), ready(Device::cuda(c.device)), counters(std::move(ctr)) {}
  ~State() {
    if (comm != nullptr) {
      // A poisoned communicator may have peers stuck mid-protocol: abort rather than destroy.
      if (poisoned)
        (void)ncclCommAbort(comm);
      else
        (void)ncclCommDestroy(comm);
    }
    if (scratch != nullptr) (void)cudaFree(scratch);
    if (staging != nullptr) (void)cudaFree(staging);
  }

  /// At least `bytes` of device memory for staging host buffers (the previous contents are not kept).
  std::byte* stage(std::size_t bytes) {
    if (bytes > staging_bytes) {
      HZP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.ref().native())));
      if (staging != nullptr) HZP_CUDA_CHECK(cudaFree(staging));
      staging = nullptr;
      HZP_CUDA_CHECK(cudaMalloc(&staging, bytes));
      staging_bytes = bytes;
    }
    return static_cast<std::byte*>(staging);
  }

  Device device() const { return Device::cuda(config.device); }

  void check_usable(const char* what) const {
    if (poisoned)
      HZP_THROW(NcclError, "nccl communicator '", config.name, "' (rank ", rank, ") is unusable after an earlier "
                "timeout or error; ", what, " refused");
  }

  /// Polls an operation that returned ncclInProgress (non-blocking communicator) until it settles.
  void settle(const char* what) {
    const double deadline = wall_seconds() + config.timeout_s;
    for (;;) {
      ncclResult_t st = ncclSuccess;
      HZP_NCCL_CHECK(ncclCommGetAsyncError(comm, &st));
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) {
        poisoned = true;
        HZP_THROW(NcclError, "nccl ", what, " on '", config.name, "' (rank ", rank, "): ", ncclGetErrorString(st));
      }
      if (wall_seconds() > deadline) {
        poisoned = true;
        (void)ncclCommAbort(comm);
        comm = nullptr;
        HZP_THROW(TimeoutError, "nccl ", what, " on '", config.name, "' (rank ", rank, ") did not settle within ",
                  config.timeout_s, " s (collectives.timeout_s)");
      }
      std::this_thread::yield();
    }
  }

  void finish_init() {
    HZP_CUDA_CHECK(cudaSetDevice(config.device));
    settle("initialisation");
    HZP_NCCL_CHECK(ncclCommCount(comm, &size));
    HZP_NCCL_CHECK(ncclCommUserRank(comm, &rank));
    group = counters->intern_group(config.name);
    HZP_CUDA_CHECK(cudaMalloc(&scratch, 4));
    for (std::size_t i = 1; i < config.node_of_rank.size(); ++i)
      spans_nodes |= config.node_of_rank[i] != config.node_of_rank[0];
  }
};

namespace {

ncclConfig_t nonblocking_config() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  return c;
}

/// One enqueued call (or batch of point-to-point calls in one NCCL group): its completion event, the optional link
/// hold, and what the counters record, one record per call. The caller's wait is counted on the first record and the
/// hold's sleep shared in proportion to each record's modelled time (a batch's sends hold the link in turn).
class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(NcclCommunicator::State& s, std::vector<CallRecord> recs, std::unique_ptr<GpuLinkHold> hold)
      : s_(s), recs_(std::move(recs)), hold_(std::move(hold)), done_(s.device()) {
    done_.record(s.stream);
  }
  ~NcclRequest() override = default;
  Event& done() { return done_; }

  bool test() override {
    if (finished_) return true;
    if (!done_.query()) {
      ncclResult_t st = ncclSuccess;
      if (s_.comm != nullptr && ncclCommGetAsyncError(s_.comm, &st) == ncclSuccess && st != ncclSuccess &&
          st != ncclInProgress) {
        s_.poisoned = true;
        HZP_THROW(NcclError, "nccl ", coll_op_name(recs_.front().op), " #", recs_.front().seq, " on '",
                  s_.config.name, "' (rank ", s_.rank, "): ", ncclGetErrorString(st));
      }
      return false;
    }
    complete();
    return true;
  }

  void wait() override {
    const double t0 = wall_seconds();
    const double deadline = t0 + s_.config.timeout_s;
    int spins = 0;
    while (!test()) {
      if (wall_seconds() > deadline) {
        s_.poisoned = true;
        if (s_.comm != nullptr) (void)ncclCommAbort(s_.comm);
        s_.comm = nullptr;
        HZP_THROW(TimeoutError, "nccl ", coll_op_name(recs_.front().op), " #", recs_.front().seq,
                  recs_.size() > 1 ? " (first of a batch of " + std::to_string(recs_.size()) + ")" : std::string(),
                  " on '", s_.config.name, "' (rank ", s_.rank, " of ", s_.size, ") did not complete within ",
                  s_.config.timeout_s, " s (collectives.timeout_s); the communicator was aborted");
      }
      // Yield first, then sleep briefly: a long collective should not burn a core the host may need.
      if (++spins < 1000)
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    recs_.front().wait_s += wall_seconds() - t0;
  }

 private:
  void complete() {
    finished_ = true;
    const double end = wall_seconds();
    double modelled = 0;
    for (const CallRecord& r : recs_) modelled += r.modelled_s;
    for (CallRecord& r : recs_) {
      r.end_s = end;
      if (hold_) {
        r.emulated_s = modelled > 0 ? hold_->slept_s() * r.modelled_s / modelled : 0.0;
        r.last_join_s = hold_->start_s();
      }
      r.transfer_wait_s = r.wait_s;
      s_.counters->record(r);
    }
  }

  NcclCommunicator::State& s_;
  std::vector<CallRecord> recs_;
  std::unique_ptr<GpuLinkHold> hold_;
  Event done_;
  bool finished_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(Bootstrap& bootstrap, NcclCommConfig config) {
  HZP_CHECK(config.timeout_s > 0, "nccl communicator: timeout_s = ", config.timeout_s, " must be positive");
  config.links.validate();
  HZP_CHECK(config.min_hold_s >= 0, "nccl communicator: min_hold_s = ", config.min_hold_s,
            " must be >= 0 (0 turns the hold off)");
  if (!config.node_of_rank.empty())
    HZP_CHECK(static_cast<int>(config.node_of_rank.size()) == bootstrap.size(), "nccl communicator: node_of_rank has ",
              config.node_of_rank.size(), " entries for ", bootstrap.size(), " ranks");
  HZP_CUDA_CHECK(cudaSetDevice(config.device));
  s_ = std::make_unique<State>(config, std::make_shared<CommCounters>());
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) HZP_NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof(id)), 0);
  ncclConfig_t c = nonblocking_config();
  HZP_NCCL_CHECK(ncclCommInitRankConfig(&s_->comm, bootstrap.size(), id, bootstrap.rank(), &c));
  s_->finish_init();
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state) : s_(std::move(state)) {}
NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const noexcept { return s_->rank; }
int NcclCommunicator::size() const noexcept { return s_->size; }
const std::string& NcclCommunicator::name() const noexcept { return s_->config.name; }
Device NcclCommunicator::device() const noexcept { return s_->device(); }
CommCounters& NcclCommunicator::counters() noexcept { return *s_->counters; }
StreamRef NcclCommunicator::comm_stream() const noexcept { return s_->stream.ref(); }

namespace {

/// What the counters will record of one call (its sequence number taken now, in issue order).
CallRecord call_record(NcclCommunicator::State& s, CollOp op, DType dtype, std::int64_t count, int peer,
                       std::uint64_t bytes) {
  CallRecord rec;
  rec.op = op;
  rec.dtype = dtype;
  rec.count = count;
  rec.group = s.group;
  rec.group_size = s.size;
  rec.peer = peer;
  rec.thread_id = this_thread_id();
  rec.seq = s.seq++;
  rec.start_s = wall_seconds();
  rec.algorithm = "nccl";
  rec.bytes_modelled = true;
  rec.bytes[static_cast<int>(s.spans_nodes ? LinkLevel::inter : LinkLevel::intra)] = bytes;
  return rec;
}

// Everything a start_X shares: argument checks, ordering after the caller's stream, the link hold
// around the NCCL call(s), the completion event and ordering of the caller's stream after it.
// recs: one per call the enqueue issues (one, or a point-to-point batch's), each with the bytes this rank sends
// under NCCL's algorithms; rounds[i]: how many steps call i takes (its modelled time is rounds × the link's time
// for the per-round bytes; the hold sleeps their sum).
template <typename Enqueue>
Request launch_calls(NcclCommunicator::State& s, std::vector<CallRecord> recs, const std::vector<int>& rounds,
                     StreamRef caller, Enqueue&& enqueue) {
  const CollOp op = recs.front().op;
  s.check_usable(coll_op_name(op).data());
  HZP_CHECK(caller.device() == s.device(), "nccl ", coll_op_name(op), " on '", s.config.name, "': the stream is on ",
            to_string(caller.device()), " but the communicator on ", to_string(s.device()));
  const LinkLevel level = s.spans_nodes ? LinkLevel::inter : LinkLevel::intra;

  s.ready.record(caller);
  s.ready.wait(s.stream);
  std::unique_ptr<GpuLinkHold> hold;
  if (s.config.links.enabled || s.config.min_hold_s > 0) {
    hold = std::make_unique<GpuLinkHold>();
    hold->start(s.stream);
  }
  try {
    enqueue(static_cast<cudaStream_t>(s.stream.ref().native()));
    s.settle(coll_op_name(op).data());
  } catch (...) {
    // The stamp host function points at `hold`: let the stream pass it before `hold` is freed.
    if (hold) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.stream.ref().native()));
    throw;
  }
  if (hold) {
    const LinkModel& link = s.config.links.at(level);
    double modelled = 0;
    for (std::size_t i = 0; i < recs.size(); ++i) {
      const std::uint64_t bytes = recs[i].bytes[static_cast<int>(level)];
      const int r = rounds[i];
      recs[i].modelled_s =
          s.config.links.enabled && r > 0 ? r * link.seconds(bytes / static_cast<std::uint64_t>(r)) : 0.0;
      modelled += recs[i].modelled_s;
    }
    if (modelled < s.config.min_hold_s) {  // a known-duration hold (NcclCommConfig::min_hold_s): the call's whole time
      recs.front().modelled_s += s.config.min_hold_s - modelled;
      modelled = s.config.min_hold_s;
    }
    hold->finish(s.stream, modelled);
  }
  auto req = std::make_unique<NcclRequest>(s, std::move(recs), std::move(hold));
  // The caller's later work sees the result. Where the caller's thread observes that stream's stalls (the step
  // driver's compute stream), the wait is bracketed by timed events: the device time it holds the stream.
  time_device_wait(caller, StallKind::at_issue, [&] { req->done().wait(caller); });
  return Request(std::move(req));
}

// One NCCL call: `bytes` is what this rank sends under NCCL's ring algorithms; `rounds` how many steps the ring takes.
template <typename Enqueue>
Request launch(NcclCommunicator::State& s, CollOp op, DType dtype, std::int64_t count, int peer, StreamRef caller,
               std::uint64_t bytes, int rounds, Enqueue&& enqueue) {
  std::vector<CallRecord> recs{call_record(s, op, dtype, count, peer, bytes)};
  return launch_calls(s, std::move(recs), {rounds}, caller, std::forward<Enqueue>(enqueue));
}

void check_on(const NcclCommunicator::State& s, const char* arg, Device d) {
  HZP_CHECK(d == s.device(), "nccl communicator '", s.config.name, "': ", arg, " is on ", to_string(d),
            ", expected ", to_string(s.device()), " (NCCL moves device buffers)");
}

std::uint64_t elem_bytes(std::int64_t n, DType t) { return static_cast<std::uint64_t>(n) * dtype_size(t); }

}  // namespace

// Host buffers with the host stream (the step's scalars: the loss, the norm's sum of squares; and the debugging
// gathers of state brought to the host) are staged: copied to device memory on the communication stream, reduced
// or gathered there, copied back, and the host waits for the copy. Such a value must reach the host anyway, so
// the wait is the one the caller would have made; the request returned is complete.
namespace {
bool host_call(ConstTensorView a, StreamRef s) { return a.device().is_cpu() && s.device().is_cpu(); }
constexpr std::size_t kStageAlign = 256;
std::size_t aligned(std::size_t n) { return (n + kStageAlign - 1) / kStageAlign * kStageAlign; }

/// `in` copied to device staging, `op(device in, device out, communication stream)` run and waited for, and the
/// device out copied back into `out`. When `out` starts where `in` does (an all-reduce's one buffer), one staging
/// region serves both, as NCCL's in-place forms expect.
template <typename Op>
Request staged(NcclCommunicator::State& st, ConstTensorView in, TensorView out, Op&& op) {
  const bool in_place = out.data() == in.data();
  std::byte* d = st.stage(in_place ? std::max(in.bytes(), out.bytes()) : aligned(in.bytes()) + out.bytes());
  std::byte* d_out = in_place ? d : d + aligned(in.bytes());
  const StreamRef cs = st.stream.ref();
  copy_bytes(d, st.device(), in.data(), Device::cpu(), in.bytes(), cs);
  op(ConstTensorView(d, in.shape(), in.dtype(), st.device()), TensorView(d_out, out.shape(), out.dtype(), st.device()),
     cs)
      .wait();
  copy_bytes(out.data(), Device::cpu(), d_out, st.device(), out.bytes(), cs);
  cs.synchronize();
  return Request();
}
}  // namespace

Request NcclCommunicator::start_all_gather(ConstTensorView in, TensorView out, StreamRef s) {
  State& st = *s_;
  if (host_call(in, s) && out.device().is_cpu())
    return staged(st, in, out, [&](ConstTensorView i, TensorView o, StreamRef cs) { return start_all_gather(i, o, cs); });
  check_on(st, "in", in.device());
  check_on(st, "out", out.device());
  HZP_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * st.size, "nccl all_gather on '", st.config.name,
            "': out has ", out.numel(), " ", dtype_name(out.dtype()), " elements, expected ", st.size, " x ",
            in.numel(), " ", dtype_name(in.dtype()));
  const std::int64_t n = in.numel();
  return launch(st, CollOp::all_gather, in.dtype(), n, -1, s, elem_bytes(n, in.dtype()) * (st.size - 1), st.size - 1,
                [&](cudaStream_t cs) {
                  HZP_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<std::size_t>(n), nccl_type(in.dtype()),
                                               st.comm, cs));
                });
}

Request NcclCommunicator::start_reduce_scatter(ConstTensorView in, TensorView out, ReduceOp op, StreamRef s) {
  State& st = *s_;
  check_on(st, "in", in.device());
  check_on(st, "out", out.device());
  HZP_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * st.size, "nccl reduce_scatter on '",
            st.config.name, "': in has ", in.numel(), " elements, expected ", st.size, " x ", out.numel());
  const std::int64_t n = out.numel();
  return launch(st, CollOp::reduce_scatter, in.dtype(), in.numel(), -1, s, elem_bytes(n, in.dtype()) * (st.size - 1),
                st.size - 1, [&](cudaStream_t cs) {
                  HZP_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), static_cast<std::size_t>(n),
                                                   nccl_type(in.dtype()), nccl_op(op), st.comm, cs));
                });
}

Request NcclCommunicator::start_all_reduce(TensorView buf, ReduceOp op, StreamRef s) {
  State& st = *s_;
  if (host_call(buf, s))
    return staged(st, buf, buf, [&](ConstTensorView, TensorView o, StreamRef cs) { return start_all_reduce(o, op, cs); });
  check_on(st, "buf", buf.device());
  const std::int64_t n = buf.numel();
  // Ring all-reduce: a reduce-scatter and an all-gather, each sending (W-1)/W of the buffer.
  const std::uint64_t bytes = st.size > 1 ? 2 * elem_bytes(n, buf.dtype()) * (st.size - 1) / st.size : 0;
  return launch(st, CollOp::all_reduce, buf.dtype(), n, -1, s, bytes, 2 * (st.size - 1), [&](cudaStream_t cs) {
    HZP_NCCL_CHECK(ncclAllReduce(buf.data(), buf.data(), static_cast<std::size_t>(n), nccl_type(buf.dtype()),
                                 nccl_op(op), st.comm, cs));
  });
}

Request NcclCommunicator::start_all_to_all(ConstTensorView in, TensorView out, StreamRef s) {
  State& st = *s_;
  check_on(st, "in", in.device());
  check_on(st, "out", out.device());
  HZP_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() && in.numel() % st.size == 0, "nccl all_to_all on '",
            st.config.name, "': in and out must hold the same multiple of ", st.size, " elements (got ", in.numel(),
            " and ", out.numel(), ")");
  const std::int64_t n = in.numel() / st.size;
  const std::size_t eb = dtype_size(in.dtype());
  return launch(st, CollOp::all_to_all, in.dtype(), in.numel(), -1, s, elem_bytes(n, in.dtype()) * (st.size - 1),
                st.size > 1 ? 1 : 0, [&](cudaStream_t cs) {
                  HZP_NCCL_CHECK(ncclGroupStart());
                  for (int r = 0; r < st.size; ++r) {
                    HZP_NCCL_CHECK(ncclSend(static_cast<const std::byte*>(in.data()) + r * n * eb,
                                            static_cast<std::size_t>(n), nccl_type(in.dtype()), r, st.comm, cs));
                    HZP_NCCL_CHECK(ncclRecv(static_cast<std::byte*>(out.data()) + r * n * eb,
                                            static_cast<std::size_t>(n), nccl_type(in.dtype()), r, st.comm, cs));
                  }
                  HZP_NCCL_CHECK(ncclGroupEnd());
                });
}

Request NcclCommunicator::start_all_to_allv(ConstTensorView in, std::span<const std::int64_t> send_counts,
                                            TensorView out, std::span<const std::int64_t> recv_counts, StreamRef s) {
  State& st = *s_;
  check_on(st, "in", in.device());
  check_on(st, "out", out.device());
  HZP_CHECK(static_cast<int>(send_counts.size()) == st.size && static_cast<int>(recv_counts.size()) == st.size,
            "nccl all_to_allv on '", st.config.name, "': ", send_counts.size(), " send and ", recv_counts.size(),
            " receive counts for ", st.size, " ranks");
  std::int64_t total_send = 0, total_recv = 0, sent_off_rank = 0;
  for (int r = 0; r < st.size; ++r) {
    total_send += send_counts[static_cast<std::size_t>(r)];
    total_recv += recv_counts[static_cast<std::size_t>(r)];
    if (r != st.rank) sent_off_rank += send_counts[static_cast<std::size_t>(r)];
  }
  HZP_CHECK(total_send <= in.numel() && total_recv <= out.numel() && in.dtype() == out.dtype(), "nccl all_to_allv on '",
            st.config.name, "': counts sum to ", total_send, " sent and ", total_recv, " received but in holds ",
            in.numel(), " and out ", out.numel());
  const std::size_t eb = dtype_size(in.dtype());
  return launch(st, CollOp::all_to_allv, in.dtype(), total_send, -1, s, elem_bytes(sent_off_rank, in.dtype()),
                st.size > 1 ? 1 : 0, [&](cudaStream_t cs) {
                  HZP_NCCL_CHECK(ncclGroupStart());
                  std::int64_t so = 0, ro = 0;
                  for (int r = 0; r < st.size; ++r) {
                    const auto sc = send_counts[static_cast<std::size_t>(r)], rc = recv_counts[static_cast<std::size_t>(r)];
                    if (sc > 0)
                      HZP_NCCL_CHECK(ncclSend(static_cast<const std::byte*>(in.data()) + so * eb,
                                              static_cast<std::size_t>(sc), nccl_type(in.dtype()), r, st.comm, cs));
                    if (rc > 0)
                      HZP_NCCL_CHECK(ncclRecv(static_cast<std::byte*>(out.data()) + ro * eb,
                                              static_cast<std::size_t>(rc), nccl_type(in.dtype()), r, st.comm, cs));
                    so += sc;
                    ro += rc;
                  }
                  HZP_NCCL_CHECK(ncclGroupEnd());
                });
}

Request NcclCommunicator::start_broadcast(TensorView buf, int root, StreamRef s) {
  State& st = *s_;
  check_on(st, "buf", buf.device());
  HZP_CHECK(root >= 0 && root < st.size, "nccl broadcast on '", st.config.name, "': root ", root, " outside [0, ",
            st.size, ")");
  const std::int64_t n = buf.numel();
  return launch(st, CollOp::broadcast, buf.dtype(), n, root, s,
                st.size > 1 && st.rank != (root + st.size - 1) % st.size ? elem_bytes(n, buf.dtype()) : 0,
                st.size > 1 ? 1 : 0, [&](cudaStream_t cs) {
                  HZP_NCCL_CHECK(ncclBroadcast(buf.data(), buf.data(), static_cast<std::size_t>(n), nccl_type(buf.dtype()),
                                               root, st.comm, cs));
                });
}

Request NcclCommunicator::start_send(ConstTensorView buf, int peer, int tag, StreamRef s) {
  State& st = *s_;
  check_on(st, "buf", buf.device());
  HZP_CHECK(peer >= 0 && peer < st.size, "nccl send on '", st.config.name, "': peer ", peer, " outside [0, ", st.size, ")");
  (void)tag;
  const std::int64_t n = buf.numel();
  return launch(st, CollOp::send, buf.dtype(), n, peer, s, elem_bytes(n, buf.dtype()), 1, [&](cudaStream_t cs) {
    HZP_NCCL_CHECK(ncclSend(buf.data(), static_cast<std::size_t>(n), nccl_type(buf.dtype()), peer, st.comm, cs));
  });
}

Request NcclCommunicator::start_recv(TensorView buf, int peer, int tag, StreamRef s) {
  State& st = *s_;
  check_on(st, "buf", buf.device());
  HZP_CHECK(peer >= 0 && peer < st.size, "nccl recv on '", st.config.name, "': peer ", peer, " outside [0, ", st.size, ")");
  (void)tag;
  const std::int64_t n = buf.numel();
  return launch(st, CollOp::recv, buf.dtype(), n, peer, s, 0, 0, [&](cudaStream_t cs) {
    HZP_NCCL_CHECK(ncclRecv(buf.data(), static_cast<std::size_t>(n), nccl_type(buf.dtype()), peer, st.comm, cs));
  });
}

Request NcclCommunicator::start_p2p_batch(std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                                          StreamRef s) {
  State& st = *s_;
  if (sends.empty() && recvs.empty()) return Request();
  for (const RecvOp& r : recvs) {
    check_on(st, "a batch's receive buffer", r.buf.device());
    HZP_CHECK(r.peer >= 0 && r.peer < st.size, "nccl p2p batch on '", st.config.name, "': receive from peer ", r.peer,
              " outside [0, ", st.size, ")");
  }
  for (const SendOp& m : sends) {
    check_on(st, "a batch's send buffer", m.buf.device());
    HZP_CHECK(m.peer >= 0 && m.peer < st.size, "nccl p2p batch on '", st.config.name, "': send to peer ", m.peer,
              " outside [0, ", st.size, ")");
  }
  // Numbered as the default implementation starts them: the receives, then the sends.
  std::vector<CallRecord> recs;
  std::vector<int> rounds;
  for (const RecvOp& r : recvs) {
    recs.push_back(call_record(st, CollOp::recv, r.buf.dtype(), r.buf.numel(), r.peer, 0));
    rounds.push_back(0);
  }
  for (const SendOp& m : sends) {
    recs.push_back(call_record(st, CollOp::send, m.buf.dtype(), m.buf.numel(), m.peer,
                               elem_bytes(m.buf.numel(), m.buf.dtype())));
    rounds.push_back(1);
  }
  return launch_calls(st, std::move(recs), rounds, s, [&](cudaStream_t cs) {
    HZP_NCCL_CHECK(ncclGroupStart());
    for (const RecvOp& r : recvs)
      HZP_NCCL_CHECK(ncclRecv(r.buf.data(), static_cast<std::size_t>(r.buf.numel()), nccl_type(r.buf.dtype()), r.peer,
                              st.comm, cs));
    for (const SendOp& m : sends)
      HZP_NCCL_CHECK(ncclSend(m.buf.data(), static_cast<std::size_t>(m.buf.numel()), nccl_type(m.buf.dtype()), m.peer,
                              st.comm, cs));
    HZP_NCCL_CHECK(ncclGroupEnd());
  });
}

Request NcclCommunicator::start_barrier() {
  State& st = *s_;
  // A 1-element all-reduce on the communication stream; the request completes when every rank joined.
  return launch(st, CollOp::barrier, DType::i32, 0, -1, st.stream.ref(), 0, 0, [&](cudaStream_t cs) {
    HZP_NCCL_CHECK(ncclAllReduce(st.scratch, st.scratch, 1, ncclInt32, ncclSum, st.comm, cs));
  });
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, std::string name, bool share_counters) {
  State& st = *s_;
  st.check_usable("split");
  NcclCommConfig c = st.config;
  c.name = std::move(name);
  c.node_of_rank.clear();  // the sub-group's nodes are not known here: modelled as one node
  auto ns = std::make_unique<State>(c, share_counters ? st.counters : std::make_shared<CommCounters>());
  ncclConfig_t cfg = nonblocking_config();
  HZP_NCCL_CHECK(ncclCommSplit(st.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &ns->comm, &cfg));
  st.settle("split");
  if (color < 0) return nullptr;
  ns->finish_init();
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(ns)));
}

std::unique_ptr<Communicator> NcclCommunicator::duplicate(std::string name, bool share_counters) {
  return split(0, s_->rank, std::move(name), share_counters);
}

}  // namespace hzp::coll
