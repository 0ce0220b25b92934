// MpiCommunicator: construction from a world and its node map (and its shared-memory transport),
// split/duplicate, and the start_X entry points: argument checks, the choice between the ring and the
// latency-optimal algorithm (or MPICH's native collective), the link model and reservation, and the
// request that runs the call.
#include "hzp/collectives/mpi_communicator.hpp"

#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <numeric>

#include "carried_algorithm_name.hpp"
#include "comm_state.hpp"
#include "hzp/collectives/device_stall_clock.hpp"
#include "hzp/core/clock.hpp"
#include "join_round.hpp"
#include "mpi_check.hpp"
#include "native_collectives.hpp"
#include "phantom.hpp"
#include "shm_transport.hpp"
#include "wait_policy.hpp"

namespace hzp::coll {

using detail::CallInfo;
using detail::CommState;
using detail::Header;
using detail::Reducer;

namespace {

const std::byte* bytes_of(const ConstTensorView& v) { return static_cast<const std::byte*>(v.data()); }
std::byte* bytes_of(const TensorView& v) { return static_cast<std::byte*>(v.data()); }

void check_host(CollOp op, const char* what, const ConstTensorView& v) {
  HZP_CHECK(v.device().is_cpu(), coll_op_name(op), ": ", what, " is on ", to_string(v.device()),
            "; the MPI backend works on host buffers");
  HZP_CHECK(v.data() != nullptr || v.numel() == 0, coll_op_name(op), ": ", what, " has ", v.numel(),
            " elements but no data pointer");
}

// A call's buffers: on the host (the MPI backend), or, in a phantom world only, all on one CUDA device with a stream
// of that device, where the stand-in is enqueued (docs/phantom.md, "On the GPU"). Host buffers make the host wait for
// the stream first, as before.
struct Named {
  const char* what;
  ConstTensorView v;
};

detail::Place check_place(const CommState& st, CollOp op, StreamRef s, std::initializer_list<Named> bufs) {
  const Device d = bufs.begin()->v.device();
  if (d.is_cpu() || !st.phantom) {
    for (const Named& b : bufs) check_host(op, b.what, b.v);
    s.synchronize();
    return {};
  }
  for (const Named& b : bufs) {
    HZP_CHECK(b.v.device() == d, "phantom ", coll_op_name(op), " on '", st.name, "': ", bufs.begin()->what, " is on ",
              to_string(d), " but ", b.what, " on ", to_string(b.v.device()), "; one call's buffers share a device");
    HZP_CHECK(b.v.data() != nullptr || b.v.numel() == 0, coll_op_name(op), ": ", b.what, " has ", b.v.numel(),
              " elements but no data pointer");
  }
  HZP_CHECK(s.device() == d, "phantom ", coll_op_name(op), " on '", st.name, "': the buffers are on ", to_string(d),
            " but the stream on ", to_string(s.device()), "; a call on device buffers is enqueued on a stream of "
            "their device");
  return {d, s};
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  if (an == 0 || bn == 0) return false;
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return pa < pb + bn && pb < pa + an;
}

int query_tag_ub(MPI_Comm comm) {
  void* v = nullptr;
  int flag = 0;
  HZP_MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &v, &flag));
  return flag ? *static_cast<int*>(v) : 32767;
}

}  // namespace

// ---- construction -------------------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm world, const Topology& topology, MpiCommConfig config, std::string name) {
  config.validate();
  int wr = 0, ws = 0;
  HZP_MPI_CHECK(MPI_Comm_rank(world, &wr));
  HZP_MPI_CHECK(MPI_Comm_size(world, &ws));
  HZP_CHECK(topology.world_size() == ws, "the topology describes ", topology.world_size(),
            " ranks but the MPI communicator given as world '", name, "' has ", ws);
  auto ctx = std::make_shared<detail::WorldContext>();
  ctx->node_of_world_rank.resize(static_cast<std::size_t>(ws));
  for (int r = 0; r < ws; ++r) ctx->node_of_world_rank[static_cast<std::size_t>(r)] = topology.node_of(r);
  if (config.links.enabled)
    ctx->links = std::make_shared<LinkEmulator>(config.links, ctx->node_of_world_rank, wr, world);

  auto st = std::make_shared<CommState>();
  MPI_Request req = MPI_REQUEST_NULL;
  HZP_MPI_CHECK(MPI_Comm_idup(world, &st->comm, &req));
  detail::wait_mpi_request(req, config, "MPI_Comm_idup", name);
  HZP_MPI_CHECK(MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN));
  // Our tag layout (comm_state.hpp) needs the standard's minimum tag bound.
  const int tag_ub = query_tag_ub(st->comm);
  HZP_CHECK(tag_ub >= 32767, "MPI_TAG_UB = ", tag_ub, " is below the 32767 the MPI standard guarantees");
  // Which ranks share a machine (for the shared-memory transport), on the duplicate: nothing of
  // ours ever travels on the caller's communicator.
  detail::discover_machines(*ctx, st->comm, config, name);
  st->rank = wr;
  st->size = ws;
  std::vector<int> members(static_cast<std::size_t>(ws));
  std::iota(members.begin(), members.end(), 0);
  detail::set_members(*st, ctx, config, std::move(members), std::move(name), std::make_shared<CommCounters>());
  st->channel_id = 1;  // segment names also carry the world's job_uid
  st->shm = detail::ShmTransport::create(*st);
  state_ = std::move(st);
}

MpiCommunicator::MpiCommunicator(std::shared_ptr<CommState> state) : state_(std::move(state)) {}
MpiCommunicator::~MpiCommunicator() = default;

std::unique_ptr<MpiCommunicator> make_mpi_world(const Topology& topology, const MpiCommConfig& config, MPI_Comm world,
                                                std::string name) {
  return std::make_unique<MpiCommunicator>(world, topology, config, std::move(name));
}

namespace {
// A child communicator: same world, config and (optionally) counters; its own MPI_Comm.
std::shared_ptr<CommState> child_state(const CommState& parent, MPI_Comm comm, std::vector<int> world_ranks,
                                       std::string name, bool share_counters, std::uint64_t ordinal) {
  auto st = std::make_shared<CommState>();
  st->comm = comm;
  HZP_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  HZP_MPI_CHECK(MPI_Comm_rank(comm, &st->rank));
  HZP_MPI_CHECK(MPI_Comm_size(comm, &st->size));
  detail::set_members(*st, parent.world, parent.config, std::move(world_ranks), std::move(name),
                      share_counters ? parent.counters : std::make_shared<CommCounters>());
  st->channel_id = detail::child_channel_id(parent.channel_id, ordinal, st->world_ranks.front());
  st->shm = detail::ShmTransport::create(*st);  // collective over the child
  return st;
}
}  // namespace

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, std::string name, bool share_counters) {
  CommState& st = *state_;
  st.check_usable(CollOp::barrier);
  HZP_CHECK(!st.phantom, "split '", name, "' of phantom communicator '", st.name, "' (colour ", color, ", key ", key,
            "): a phantom world has no peers to tell their colours; the caller must use split_by (docs/phantom.md)");
  const std::uint64_t ordinal = ++st.children;  // counted by every member, also those left out
  MPI_Comm comm = MPI_COMM_NULL;
  // MPI_Comm_split has no nonblocking form; it is a setup call, off the hot path.
  HZP_MPI_CHECK(MPI_Comm_split(st.comm, color < 0 ? MPI_UNDEFINED : color, key, &comm));
  if (comm == MPI_COMM_NULL) return nullptr;
  int n = 0;
  HZP_MPI_CHECK(MPI_Comm_size(comm, &n));
  // The members' world ranks, so the child knows the node of every peer.
  std::vector<int> world_ranks(static_cast<std::size_t>(n));
  int mine = st.world_ranks[static_cast<std::size_t>(st.rank)];
  MPI_Request req = MPI_REQUEST_NULL;
  HZP_MPI_CHECK(MPI_Iallgather(&mine, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, comm, &req));
  detail::wait_mpi_request(req, st.config, "split (world-rank exchange)", name);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(child_state(st, comm, std::move(world_ranks), std::move(name), share_counters, ordinal)));
}

std::unique_ptr<Communicator> MpiCommunicator::duplicate(std::string name, bool share_counters) {
  CommState& st = *state_;
  st.check_usable(CollOp::barrier);
  if (st.phantom) return phantom_child(st.world_ranks, st.rank, std::move(name), share_counters);
  const std::uint64_t ordinal = ++st.children;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  HZP_MPI_CHECK(MPI_Comm_idup(st.comm, &comm, &req));
  detail::wait_mpi_request(req, st.config, "MPI_Comm_idup", name);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(child_state(st, comm, st.world_ranks, std::move(name), share_counters, ordinal)));
}

// ---- accessors -----------------------------------------------------------------------------------------

int MpiCommunicator::rank() const noexcept { return state_->rank; }
int MpiCommunicator::size() const noexcept { return state_->size; }
const std::string& MpiCommunicator::name() const noexcept { return state_->name; }
CommCounters& MpiCommunicator::counters() noexcept { return *state_->counters; }
const MpiCommConfig& MpiCommunicator::config() const noexcept { return state_->config; }
MPI_Comm MpiCommunicator::mpi_comm() const noexcept { return state_->comm; }
int MpiCommunicator::world_rank_of(int r) const {
  HZP_CHECK(r >= 0 && r < state_->size, "rank ", r, " outside group '", state_->name, "' of ", state_->size);
  return state_->world_ranks[static_cast<std::size_t>(r)];
}
int MpiCommunicator::node_of(int r) const {
  HZP_CHECK(r >= 0 && r < state_->size, "rank ", r, " outside group '", state_->name, "' of ", state_->size);
  return state_->nodes[static_cast<std::size_t>(r)];
}
LinkLevel MpiCommunicator::level_to(int peer) const {
  HZP_CHECK(peer >= 0 && peer < state_->size, "rank ", peer, " outside group '", state_->name, "'");
  return state_->level_to(peer);
}
std::size_t MpiCommunicator::scratch_bytes() const { return state_->scratch.capacity_bytes(); }
Transport MpiCommunicator::transport() const noexcept { return state_->shm ? Transport::shm : Transport::mpi; }
std::size_t MpiCommunicator::single_copy_bytes() const noexcept {
  return state_->shm ? state_->shm->single_copy_bytes() : 0;
}
bool MpiCommunicator::mapped_buffers() const noexcept { return state_->shm && state_->shm->mapped_buffers(); }
bool MpiCommunicator::failed() const noexcept { return state_->failed.load(std::memory_order_acquire); }
std::string MpiCommunicator::failure_reason() const {
  std::lock_guard<std::mutex> lock(state_->fail_mu);
  return state_->fail_reason;
}

// ---- launching a call ----------------------------------------------------------------------------------

namespace {

bool is_small(const CommState& st, CollOp op, std::int64_t count, DType dtype) {
  const std::size_t threshold = st.config.small_message_bytes;
  return threshold > 0 && algbw_bytes(op, static_cast<std::size_t>(count), dtype, st.size) < threshold;
}

Request launch_unguarded(const std::shared_ptr<CommState>& sp, const CallInfo& info,
                         detail::ScratchPool::Lease scratch, std::unique_ptr<detail::Algorithm> live,
                         const detail::DryFactory& dry, bool model_all_ranks, const detail::NativeCall* native) {
  CommState& st = *sp;
  const bool p2p = info.op == CollOp::send || info.op == CollOp::recv;
  Header own{info.join, info.join};
  CollectiveModel model;
  const CollectiveModel* model_ptr = nullptr;
  auto booked = std::make_shared<LinkReservation>();
  detail::JoinBooking book;
  if (st.world->links) {
    model = detail::model_call(st, dry, model_all_ranks);
    model_ptr = &model;
    if (live && !p2p) {
      // Our algorithm: its links are booked once the join round has told the group's last join.
      live = detail::with_join_round(std::move(live), st.rank, st.size);
      book = [links = st.world->links.get(), booked, model](double last_join) {
        *booked = links->reserve(last_join, model);
        return booked->ready_s;
      };
    } else {
      // At this rank's join: a phantom world has no peers to hear from; MPICH's native collectives carry their header
      // in a collective of their own, posted at launch; a message is booked by its sender alone (a receive books no
      // link of its own), which does not wait for its receiver.
      *booked = st.world->links->reserve(info.join, model);
      // A live receive carries no ready of its own: what it hears is its sender's, when the message can leave.
      own.ready = live && info.op == CollOp::recv ? 0.0 : booked->ready_s;
    }
  }
  std::unique_ptr<detail::Operation> op;
  if (st.phantom) {
    // The stand-in data was written by start_X; the bytes are this rank's algorithm's, replayed dry.
    auto self = dry(st.rank);
    op = detail::make_phantom_operation(own, detail::replay_bytes(st, *self), self->name());
  } else if (native != nullptr) {
    auto self = dry(st.rank);
    const auto bytes = detail::replay_bytes(st, *self);
    op = detail::make_native_operation(st, *native, own, std::move(scratch), bytes,
                                       detail::carried_algorithm_name(detail::Carrier::native, self->name()));
  } else {
    const detail::TagPair tags = p2p ? detail::p2p_tags(info.tag) : detail::collective_tags(info.seq);
    op = detail::make_p2p_operation(st, std::move(live), tags, own, std::move(scratch), std::move(book));
  }
  return detail::make_request(sp, info, std::move(op), model_ptr, std::move(booked));
}

// A call that failed after taking its sequence number leaves this rank out of step with its peers
// (their next call would match ours with a different number): the communicator cannot be trusted.
template <typename Start>
Request guarded(const std::shared_ptr<CommState>& sp, const CallInfo& info, Start&& start) {
  try {
    return start();
  } catch (const std::exception& e) {
    sp->mark_failed(std::string(coll_op_name(info.op)) + " #" + std::to_string(info.seq) +
                    " failed to start: " + e.what());
    throw;
  }
}

Request launch(const std::shared_ptr<CommState>& sp, const CallInfo& info, detail::ScratchPool::Lease scratch,
               std::unique_ptr<detail::Algorithm> live, const detail::DryFactory& dry, bool model_all_ranks,
               const detail::NativeCall* native) {
  return guarded(sp, info, [&] {
    return launch_unguarded(sp, info, std::move(scratch), std::move(live), dry, model_all_ranks, native);
  });
}

// A phantom call on device buffers: the stand-in enqueued on the call's stream and, with emulated links, the stream
// held for the link model's time of the whole group, booked on this rank's links when the stream reaches the call
// (GpuLinkHold), as the host form books at its join and holds its waiter. The bytes are the same dry replay's.
template <typename StandIn>
Request launch_on_stream(const std::shared_ptr<CommState>& sp, const CallInfo& info, const detail::DryFactory& dry,
                         bool model_all_ranks, StreamRef s, StandIn&& stand_in) {
  CommState& st = *sp;
  return guarded(sp, info, [&] {
    std::optional<CollectiveModel> model;
    std::unique_ptr<GpuLinkHold> hold;
    // The stand-in and the hold occupy the call's own stream: where that is the step's observed compute stream
    // (an engine's at-issue collective), the interval is its stall, timed as the NCCL communicator times its wait.
    time_device_wait(s, StallKind::at_issue, [&] {
      if (st.world->links) {
        model = detail::model_call(st, dry, model_all_ranks);
        hold = std::make_unique<GpuLinkHold>();
        hold->start(s, [links = st.world->links, m = *model](double at) { return links->reserve(at, m).ready_s; });
      }
      try {
        stand_in();
        if (hold) hold->finish(s, model->duration_s);
      } catch (...) {
        // The stamp already queued on the stream points at the hold: leave it allocated rather than free it under
        // the callback thread (as PhantomStreamOperation does when abandoned; waiting could hang on a broken stream).
        (void)hold.release();
        throw;
      }
    });
    auto self = dry(st.rank);
    auto op = detail::make_phantom_stream_operation(Header{info.join, info.join}, detail::replay_bytes(st, *self),
                                                    self->name(), s, std::move(hold));
    return detail::make_request(sp, info, std::move(op), model ? &*model : nullptr, nullptr);
  });
}

// A phantom call: the stand-in at once on host buffers (then the host form's launch), or enqueued on the stream.
template <typename StandIn>
Request launch_phantom(const std::shared_ptr<CommState>& sp, const CallInfo& info, const detail::DryFactory& dry,
                       bool model_all_ranks, detail::Place at, StandIn&& stand_in) {
  if (at.device.is_cuda()) return launch_on_stream(sp, info, dry, model_all_ranks, at.stream, stand_in);
  stand_in();
  return launch(sp, info, {}, nullptr, dry, model_all_ranks, nullptr);
}

// MPICH's own collective for the call (collectives.mpi_native): a reduction leases the scratch its bf16 sums go
// through in fp32 (native_scratch_bytes), the other ops lease none.
Request launch_native(const std::shared_ptr<CommState>& sp, const CallInfo& info, const detail::DryFactory& dry,
                      bool model_all_ranks, const detail::NativeCall& nc) {
  detail::ScratchPool::Lease scratch;
  if (nc.reduces) scratch = sp->scratch.acquire(detail::native_scratch_bytes(nc, sp->size));
  return launch(sp, info, std::move(scratch), nullptr, dry, model_all_ranks, &nc);
}

CallInfo begin_call(CommState& st, CollOp op, DType dtype, std::int64_t count, int peer = -1) {
  st.check_usable(op);
  CallInfo info;
  info.op = op;
  info.dtype = dtype;
  info.count = count;
  info.peer = peer;
  info.seq = (op == CollOp::send || op == CollOp::recv) ? st.p2p_seq++ : st.coll_seq++;
  info.join = wall_seconds();
  return info;
}

}  // namespace

Request MpiCommunicator::start_all_gather(ConstTensorView in, TensorView out, StreamRef s) {
  CommState& st = *state_;
  const CollOp op = CollOp::all_gather;
  const detail::Place at = check_place(st, op, s, {{"in", in}, {"out", out}});
  HZP_CHECK(in.dtype() == out.dtype(), "all_gather: in is ", dtype_name(in.dtype()), ", out is ",
            dtype_name(out.dtype()));
  const std::int64_t n = in.numel();
  HZP_CHECK(out.numel() == n * st.size, "all_gather on '", st.name, "': out holds ", out.numel(),
            " elements, needs size * in = ", st.size, " * ", n, " = ", n * st.size);
  const std::size_t elem = dtype_size(in.dtype());
  const std::size_t shard = static_cast<std::size_t>(n) * elem;
  const std::byte* own_slot = bytes_of(out) + shard * static_cast<std::size_t>(st.rank);
  HZP_CHECK(bytes_of(in) == own_slot || !overlaps(in.data(), shard, out.data(), out.bytes()),
            "all_gather: in overlaps out other than as out's own block (in place)");
  const CallInfo info = begin_call(st, op, in.dtype(), n);
  const bool small = is_small(st, op, n, in.dtype());
  const int p = st.size;
  auto make = [=](int q, std::byte* o, const std::byte* i) {
    return small ? detail::make_bruck_all_gather(q, p, o, i, n, elem)
                 : detail::make_ring_all_gather(q, p, o, i, detail::Blocks{n * p, p}, elem);
  };
  const detail::DryFactory dry = [=](int q) { return make(q, nullptr, nullptr); };
  if (st.phantom)
    return launch_phantom(state_, info, dry, true, at,
                          [&] { detail::phantom_all_gather(bytes_of(in), bytes_of(out), shard, st.rank, p, at); });
  if (st.config.mpi_native)
    return launch_native(state_, info, dry, true,
                         {.op = op, .in = bytes_of(in), .out = bytes_of(out), .count = n, .bytes = shard});
  return launch(state_, info, {}, make(st.rank, bytes_of(out), bytes_of(in)), dry, true, nullptr);
}

Request MpiCommunicator::start_reduce_scatter(ConstTensorView in, TensorView out, ReduceOp rop, StreamRef s) {
  CommState& st = *state_;
  const CollOp op = CollOp::reduce_scatter;
  const detail::Place at = check_place(st, op, s, {{"in", in}, {"out", out}});
  HZP_CHECK(in.dtype() == out.dtype(), "reduce_scatter: in is ", dtype_name(in.dtype()), ", out is ",
            dtype_name(out.dtype()));
  const std::int64_t n = out.numel();
  HZP_CHECK(in.numel() == n * st.size, "reduce_scatter on '", st.name, "': in holds ", in.numel(),
            " elements, needs size * out = ", st.size, " * ", n, " = ", n * st.size);
  HZP_CHECK(!overlaps(in.data(), in.bytes(), out.data(), out.bytes()), "reduce_scatter: in and out overlap");
  const Reducer red = Reducer::make(in.dtype(), rop);
  const CallInfo info = begin_call(st, op, in.dtype(), in.numel());
  const bool small = is_small(st, op, in.numel(), in.dtype());
  const int p = st.size;
  const detail::Blocks blocks{n * p, p};
  auto make = [=](int q, const std::byte* i, std::byte* o, std::byte* scratch) {
    return small ? detail::make_direct_reduce_scatter(q, p, i, o, n, red, scratch)
                 : detail::make_ring_reduce_scatter(q, p, i, o, blocks, red, scratch);
  };
  const detail::DryFactory dry = [=](int q) { return make(q, nullptr, nullptr, nullptr); };
  if (st.phantom)
    return launch_phantom(state_, info, dry, true, at,
                          [&] { detail::phantom_reduce_scatter(bytes_of(in), bytes_of(out), n, red, st.rank, p, at); });
  if (st.config.mpi_native)
    return launch_native(state_, info, dry, true,
                         {.op = op, .in = bytes_of(in), .out = bytes_of(out), .count = n, .reduces = true, .red = red});
  auto scratch = st.scratch.acquire(small ? detail::direct_reduce_scatter_scratch_bytes(p, n, red)
                                          : detail::ring_reduce_scratch_bytes(blocks, red));
  auto live = make(st.rank, bytes_of(in), bytes_of(out), scratch.data());
  return launch(state_, info, std::move(scratch), std::move(live), dry, true, nullptr);
}

Request MpiCommunicator::start_all_reduce(TensorView buf, ReduceOp rop, StreamRef s) {
  CommState& st = *state_;
  const CollOp op = CollOp::all_reduce;
  const detail::Place at = check_place(st, op, s, {{"buf", buf}});
  const std::int64_t n = buf.numel();
  const Reducer red = Reducer::make(buf.dtype(), rop);
  const CallInfo info = begin_call(st, op, buf.dtype(), n);
  const bool small = is_small(st, op, n, buf.dtype());
  const int p = st.size;
  auto make = [=](int q, std::byte* b, std::byte* scratch) {
    return small ? detail::make_recursive_doubling_all_reduce(q, p, b, n, red, scratch)
                 : detail::make_ring_all_reduce(q, p, b, n, red, scratch);
  };
  const detail::DryFactory dry = [=](int q) { return make(q, nullptr, nullptr); };
  if (st.phantom)
    return launch_phantom(state_, info, dry, true, at, [&] { detail::phantom_all_reduce(bytes_of(buf), n, red, p, at); });
  if (st.config.mpi_native)
    return launch_native(state_, info, dry, true,
                         {.op = op, .out = bytes_of(buf), .count = n, .reduces = true, .red = red});
  auto scratch = st.scratch.acquire(small ? detail::recursive_doubling_scratch_bytes(n, red)
                                          : detail::ring_reduce_scratch_bytes(detail::Blocks{n, p}, red));
  auto live = make(st.rank, bytes_of(buf), scratch.data());
  return launch(state_, info, std::move(scratch), std::move(live), dry, true, nullptr);
}

Request MpiCommunicator::start_all_to_all(ConstTensorView in, TensorView out, StreamRef s) {
  const int p = state_->size;
  HZP_CHECK(in.numel() % p == 0, "all_to_all on '", state_->name, "': in holds ", in.numel(),
            " elements, not divisible by the group size ", p);
  HZP_CHECK(out.numel() == in.numel(), "all_to_all: out holds ", out.numel(), " elements, in holds ", in.numel());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(p), in.numel() / p);
  return start_all_to_allv_impl(CollOp::all_to_all, in, counts, out, counts, s);
}

Request MpiCommunicator::start_all_to_allv(ConstTensorView in, std::span<const std::int64_t> send_counts,
                                           TensorView out, std::span<const std::int64_t> recv_counts, StreamRef s) {
  return start_all_to_allv_impl(CollOp::all_to_allv, in, send_counts, out, recv_counts, s);
}

Request MpiCommunicator::start_all_to_allv_impl(CollOp op, ConstTensorView in,
                                                std::span<const std::int64_t> send_counts, TensorView out,
                                                std::span<const std::int64_t> recv_counts, StreamRef s) {
  CommState& st = *state_;
  const int p = st.size;
  const detail::Place at = check_place(st, op, s, {{"in", in}, {"out", out}});
  HZP_CHECK(in.dtype() == out.dtype(), coll_op_name(op), ": in is ", dtype_name(in.dtype()), ", out is ",
            dtype_name(out.dtype()));
  HZP_CHECK(send_counts.size() == static_cast<std::size_t>(p) && recv_counts.size() == static_cast<std::size_t>(p),
            coll_op_name(op), " on '", st.name, "': ", send_counts.size(), " send counts and ", recv_counts.size(),
            " receive counts for a group of ", p);
  std::int64_t total_send = 0, total_recv = 0;
  for (int q = 0; q < p; ++q) {
    HZP_CHECK(send_counts[q] >= 0 && recv_counts[q] >= 0, coll_op_name(op), ": negative count for rank ", q);
    total_send += send_counts[q];
    total_recv += recv_counts[q];
  }
  HZP_CHECK(total_send <= in.numel() && total_recv <= out.numel(), coll_op_name(op), ": counts need ", total_send,
            " elements in and ", total_recv, " out; the buffers hold ", in.numel(), " and ", out.numel());
  HZP_CHECK(send_counts[st.rank] == recv_counts[st.rank], coll_op_name(op), ": rank ", st.rank, " sends itself ",
            send_counts[st.rank], " elements but expects ", recv_counts[st.rank]);
  HZP_CHECK(!overlaps(in.data(), in.bytes(), out.data(), out.bytes()), coll_op_name(op), ": in and out overlap");
  const std::size_t elem = dtype_size(in.dtype());
  const CallInfo info = begin_call(st, op, in.dtype(), total_send);
  const bool small = st.config.small_message_bytes > 0 &&
                     static_cast<std::size_t>(total_send) * elem < st.config.small_message_bytes;
  // Copies: the dry replicas outlive this call's spans only within launch(), but keep them safe.
  auto sc = std::make_shared<std::vector<std::int64_t>>(send_counts.begin(), send_counts.end());
  auto rc = std::make_shared<std::vector<std::int64_t>>(recv_counts.begin(), recv_counts.end());
  const int me = st.rank;
  // Only this rank's counts are known here, so the dry replica is of this rank alone (its receives
  // stand for its peers' sends in the model). all_to_all's counts are the same everywhere, but the
  // same path keeps one description.
  const detail::DryFactory dry = [=](int q) {
    HZP_CHECK(q == me, "all_to_all(v) can only be replayed for the calling rank");
    return detail::make_pairwise_all_to_allv(q, p, nullptr, *sc, nullptr, *rc, elem, small);
  };
  if (st.phantom)
    return launch_phantom(state_, info, dry, false, at,
                          [&] { detail::phantom_all_to_allv(bytes_of(in), *sc, bytes_of(out), *rc, elem, me, at); });
  if (st.config.mpi_native)
    return launch_native(state_, info, dry, false,
                         {.op = op, .in = bytes_of(in), .out = bytes_of(out), .elem = elem, .send_counts = *sc,
                          .recv_counts = *rc});
  auto live = detail::make_pairwise_all_to_allv(me, p, bytes_of(in), *sc, bytes_of(out), *rc, elem, small);
  return launch(state_, info, {}, std::move(live), dry, false, nullptr);
}

Request MpiCommunicator::start_broadcast(TensorView buf, int root, StreamRef s) {
  CommState& st = *state_;
  const CollOp op = CollOp::broadcast;
  const detail::Place at = check_place(st, op, s, {{"buf", buf}});
  HZP_CHECK(root >= 0 && root < st.size, "broadcast on '", st.name, "': root ", root, " outside 0..", st.size - 1);
  const CallInfo info = begin_call(st, op, buf.dtype(), buf.numel(), root);
  const int p = st.size;
  const std::size_t bytes = buf.bytes();
  const detail::DryFactory dry = [=](int q) { return detail::make_binomial_broadcast(q, p, root, nullptr, bytes); };
  // Phantom: buf is left as it is (this rank's data stands for the root's).
  if (st.phantom) return launch_phantom(state_, info, dry, true, at, [] {});
  if (st.config.mpi_native)
    return launch_native(state_, info, dry, true, {.op = op, .out = bytes_of(buf), .bytes = bytes, .root = root});
  return launch(state_, info, {}, detail::make_binomial_broadcast(st.rank, p, root, bytes_of(buf), bytes), dry,
                true, nullptr);
}

Request MpiCommunicator::start_barrier() {
  CommState& st = *state_;
  const CallInfo info = begin_call(st, CollOp::barrier, DType::u8, 0);
  const int p = st.size;
  const detail::DryFactory dry = [=](int q) { return detail::make_dissemination_barrier(q, p); };
  if (st.phantom) return launch(state_, info, {}, nullptr, dry, true, nullptr);
  if (st.config.mpi_native) return launch_native(state_, info, dry, true, {.op = CollOp::barrier});
  return launch(state_, info, {}, detail::make_dissemination_barrier(st.rank, p), dry, true, nullptr);
}

Request MpiCommunicator::start_send(ConstTensorView buf, int peer, int tag, StreamRef s) {
  return start_p2p(CollOp::send, bytes_of(buf), nullptr, buf, peer, tag, s);
}

Request MpiCommunicator::start_recv(TensorView buf, int peer, int tag, StreamRef s) {
  return start_p2p(CollOp::recv, nullptr, bytes_of(buf), buf, peer, tag, s);
}

Request MpiCommunicator::start_p2p(CollOp op, const std::byte* send_data, std::byte* recv_data, ConstTensorView buf,
                                   int peer, int tag, StreamRef s) {
  CommState& st = *state_;
  const detail::Place at = check_place(st, op, s, {{"buf", buf}});
  HZP_CHECK(peer >= 0 && peer < st.size && peer != st.rank, coll_op_name(op), " on '", st.name, "': peer ", peer,
            " must be another rank of 0..", st.size - 1, " (this is rank ", st.rank, ")");
  HZP_CHECK(tag >= 0 && tag <= kMaxUserTag, coll_op_name(op), ": tag ", tag, " outside 0..", kMaxUserTag);
  CallInfo info = begin_call(st, op, buf.dtype(), buf.numel(), peer);
  info.tag = tag;
  const std::size_t bytes = buf.bytes();
  const bool is_send = op == CollOp::send;
  const detail::DryFactory dry = [=](int) {
    return is_send ? detail::make_send(nullptr, bytes, peer) : detail::make_recv(nullptr, bytes, peer);
  };
  if (st.phantom)
    // A send completes once its modelled time has passed; a receive too, its data zeros (docs/phantom.md).
    return launch_phantom(state_, info, dry, /*model_all_ranks=*/false, at, [&] {
      if (!is_send) detail::phantom_recv(recv_data, bytes, at);
    });
  auto live = is_send ? detail::make_send(send_data, bytes, peer) : detail::make_recv(recv_data, bytes, peer);
  // Only the caller's side is known: the model uses its own message (for a receive, the sender's).
  return launch(state_, info, {}, std::move(live), dry, /*model_all_ranks=*/false, nullptr);
}

}  // namespace hzp::coll
