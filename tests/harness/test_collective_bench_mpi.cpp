// The collective benchmark under mpiexec: it reports #wrong = 0 for the MPI backend, and it does
// catch a wrong result (a communicator that corrupts one element of each all_gather output and
// drops a broadcast on one rank gives exactly the expected #wrong). Checks the oracle, not only the
// backend.
#include <memory>

#include "collective_bench.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology_mpi.hpp"
#include "mpi_test.hpp"

namespace hzp::harness {
namespace {

using coll::Communicator;
using coll::Request;

// Delegates everything; all_gather then flips element 0 of rank 0's output, and broadcast does
// nothing on the last rank (a transfer that never happened).
class FaultyCommunicator final : public Communicator {
 public:
  explicit FaultyCommunicator(std::unique_ptr<Communicator> inner) : in_(std::move(inner)) {}
  int rank() const noexcept override { return in_->rank(); }
  int size() const noexcept override { return in_->size(); }
  const std::string& name() const noexcept override { return in_->name(); }
  Device device() const noexcept override { return in_->device(); }
  coll::CommCounters& counters() noexcept override { return in_->counters(); }
  Request start_all_gather(ConstTensorView in, TensorView out, StreamRef s) override {
    in_->start_all_gather(in, out, s).wait();
    if (rank() == 0) static_cast<float*>(out.data())[0] += 1000.0f;
    return {};
  }
  Request start_reduce_scatter(ConstTensorView in, TensorView out, coll::ReduceOp op, StreamRef s) override {
    return in_->start_reduce_scatter(in, out, op, s);
  }
  Request start_all_reduce(TensorView buf, coll::ReduceOp op, StreamRef s) override {
    return in_->start_all_reduce(buf, op, s);
  }
  Request start_all_to_all(ConstTensorView in, TensorView out, StreamRef s) override {
    return in_->start_all_to_all(in, out, s);
  }
  Request start_all_to_allv(ConstTensorView in, std::span<const std::int64_t> sc, TensorView out,
                            std::span<const std::int64_t> rc, StreamRef s) override {
    return in_->start_all_to_allv(in, sc, out, rc, s);
  }
  Request start_broadcast(TensorView buf, int root, StreamRef s) override {
    // Every rank still joins the real broadcast, into a scratch copy on the last rank, so nobody hangs.
    if (rank() != size() - 1) return in_->start_broadcast(buf, root, s);
    scratch_.resize(buf.bytes());
    in_->start_broadcast(TensorView(scratch_.data(), buf.shape(), buf.dtype()), root, s).wait();
    return {};
  }
  Request start_send(ConstTensorView b, int p, int t, StreamRef s) override { return in_->start_send(b, p, t, s); }
  Request start_recv(TensorView b, int p, int t, StreamRef s) override { return in_->start_recv(b, p, t, s); }
  Request start_barrier() override { return in_->start_barrier(); }
  std::unique_ptr<Communicator> split(int c, int k, std::string n, bool sh) override {
    return in_->split(c, k, std::move(n), sh);
  }
  std::unique_ptr<Communicator> duplicate(std::string n, bool sh) override { return in_->duplicate(std::move(n), sh); }

 private:
  std::unique_ptr<Communicator> in_;
  std::vector<std::byte> scratch_;
};

CollectiveBenchOptions small_sweep() {
  CollectiveBenchOptions o;
  o.ops = {coll::CollOp::all_gather, coll::CollOp::reduce_scatter, coll::CollOp::all_reduce,
           coll::CollOp::all_to_all, coll::CollOp::broadcast};
  o.min_bytes = 64;
  o.max_bytes = 256u << 10;
  o.step_factor = 4;
  o.iters = 2;
  o.warmup_iters = 1;
  return o;
}

TEST(CollectiveBenchMpi, BackendIsExactInBothDtypes) {
  const coll::Topology topo = coll::discover_topology(MPI_COMM_WORLD, 0);
  auto world = coll::make_mpi_world(topo, coll::MpiCommConfig{});
  for (DType t : {DType::f32, DType::bf16}) {
    CollectiveBenchOptions o = small_sweep();
    o.dtype = t;
    const auto mref = measure_memcpy(1u << 20, 2, MPI_COMM_WORLD);
    EXPECT_GT(mref.one_core_gbps, 0.0);
    EXPECT_GT(mref.all_ranks_gbps, 0.0);
    const auto rows = run_collective_bench(*world, MPI_COMM_WORLD, o, mref, nullptr);
    ASSERT_EQ(rows.size(), o.ops.size() * sweep_sizes(o, world->size()).size());
    for (const auto& r : rows) {
      EXPECT_EQ(r.wrong, 0) << coll::coll_op_name(r.op) << " " << r.bytes << " B " << dtype_name(t);
      EXPECT_GT(r.time_us, 0.0);
      EXPECT_LE(r.min_us, r.p50_us);
      EXPECT_LE(r.p50_us, r.max_us);
      EXPECT_NEAR(r.busbw_gbps, r.algbw_gbps * coll::bus_factor(r.op, world->size()), 1e-9);
      // The traffic floor was timed on every rank and its busbw follows from its time.
      EXPECT_GT(r.floor_p50_us, 0.0) << coll::coll_op_name(r.op) << " " << r.bytes;
      EXPECT_NEAR(r.floor_busbw_gbps,
                  static_cast<double>(r.bytes) / (r.floor_p50_us * 1e-6) / 1e9 * coll::bus_factor(r.op, world->size()),
                  1e-6 * r.floor_busbw_gbps);
      EXPECT_NEAR(r.bus_over_floor, r.floor_p50_us / r.p50_us, 1e-9 + 1e-9 * r.bus_over_floor);
    }
  }
}

TEST(CollectiveBenchMpi, CatchesWrongResults) {
  const coll::Topology topo = coll::discover_topology(MPI_COMM_WORLD, 0);
  FaultyCommunicator faulty(coll::make_mpi_world(topo, coll::MpiCommConfig{}));
  const CollectiveBenchOptions o = small_sweep();
  const auto rows = run_collective_bench(faulty, MPI_COMM_WORLD, o, MemcpyReference{}, nullptr);
  for (const auto& r : rows) {
    const std::size_t elems = r.bytes / 4;  // fp32; broadcast: the whole buffer on the last rank
    if (r.op == coll::CollOp::all_gather) {
      EXPECT_EQ(r.wrong, 1) << r.bytes;  // one element on rank 0
    } else if (r.op == coll::CollOp::broadcast) {
      EXPECT_EQ(r.wrong, static_cast<std::int64_t>(elems)) << r.bytes;  // -1 everywhere on one rank
    } else {
      EXPECT_EQ(r.wrong, 0) << coll::coll_op_name(r.op) << " " << r.bytes;
    }
  }
}

}  // namespace
}  // namespace hzp::harness
