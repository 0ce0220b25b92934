// The collective benchmark: sweep sizes, exact input patterns and their verification, the timed loop,
// the memcpy reference, and the table/CSV formatting. Conventions: docs/collectives-benchmark.md.
#include "collective_bench.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "hzp/collectives/shared_buffer.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "traffic_floor.hpp"

namespace hzp::harness {
namespace {

using coll::CollOp;

// ---- the harness's own MPI traffic: nonblocking + yield, so oversubscribed ranks do not spin ----
void stats_wait(MPI_Request& req) {
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) HZP_THROW(MpiError, "MPI_Test on the benchmark's statistics communicator failed");
    if (done) return;
    sched_yield();
  }
}
void stats_barrier(MPI_Comm c) {
  MPI_Request req;
  MPI_Ibarrier(c, &req);
  stats_wait(req);
}
template <typename T>
T stats_reduce(T v, MPI_Datatype type, MPI_Op op, MPI_Comm c) {
  T out{};
  MPI_Request req;
  MPI_Iallreduce(&v, &out, 1, type, op, c, &req);
  stats_wait(req);
  return out;
}

// The median of this rank's times (seconds; reorders them), the maximum over ranks, in microseconds: a size's time
// is its slowest rank's.
double slowest_median_us(std::vector<double>& times, MPI_Comm stats) {
  const auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), mid, times.end());
  return stats_reduce(*mid, MPI_DOUBLE, MPI_MAX, stats) * 1e6;
}

// ---- page-aligned buffers, touched once so first-touch page faults are never timed ---------------
struct FreeDeleter {
  void operator()(std::byte* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte[], FreeDeleter>;
Buffer make_buffer(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 4095) / 4096 * 4096;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) HZP_THROW(PreconditionError, "cannot allocate ", rounded, " bytes for the benchmark");
  std::memset(p, 0, rounded);
  return Buffer(p);
}

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ---- per-op buffer shapes for one sweep size S (bytes, a multiple of W * element size) ------------
struct Shapes {
  std::size_t in = 0, out = 0;  // elements
  std::size_t count = 0;        // what the table's count column shows
  std::size_t block = 0;        // elements per rank block
};
Shapes shapes_for(CollOp op, std::size_t bytes, DType t, int w) {
  const std::size_t total = bytes / dtype_size(t);
  const std::size_t block = total / static_cast<std::size_t>(w);
  switch (op) {
    case CollOp::all_gather: return {block, total, block, block};
    case CollOp::reduce_scatter: return {total, block, block, block};
    case CollOp::all_to_all: return {total, total, total, block};
    default: return {total, total, total, block};  // all_reduce, broadcast: one buffer, in place
  }
}

template <typename T>
T to_elem(float v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16::from_float(v);
  else return static_cast<T>(v);
}

template <typename T>
void fill(T* p, std::size_t n, int rank, std::size_t offset, int w) {
  for (std::size_t i = 0; i < n; ++i) p[i] = to_elem<T>(bench_pattern(rank, offset + i, w));
}

// Expected value of element i of the output on rank r; the sum over ranks of small integers is exact.
float expected(CollOp op, int r, std::size_t i, const Shapes& s, int w, int root) {
  switch (op) {
    case CollOp::all_gather: return bench_pattern(static_cast<int>(i / s.block), i % s.block, w);
    case CollOp::reduce_scatter: {
      float sum = 0;
      for (int q = 0; q < w; ++q) sum += bench_pattern(q, static_cast<std::size_t>(r) * s.block + i, w);
      return sum;
    }
    case CollOp::all_reduce: {
      float sum = 0;
      for (int q = 0; q < w; ++q) sum += bench_pattern(q, i, w);
      return sum;
    }
    case CollOp::all_to_all:
      return bench_pattern(static_cast<int>(i / s.block), static_cast<std::size_t>(r) * s.block + i % s.block, w);
    case CollOp::broadcast: return bench_pattern(root, i, w);
    default: return 0;
  }
}

// Starts one op on the views of this size. In-place ops (all_reduce, broadcast) work on `out`.
coll::Request start(coll::Communicator& c, CollOp op, const Shapes& s, DType t, std::byte* in, std::byte* out,
                    int root) {
  const auto n_in = static_cast<std::int64_t>(s.in), n_out = static_cast<std::int64_t>(s.out);
  const ConstTensorView vin(in, Shape{n_in}, t);
  const TensorView vout(out, Shape{n_out}, t);
  const StreamRef host = StreamRef::host();
  switch (op) {
    case CollOp::all_gather: return c.start_all_gather(vin, vout, host);
    case CollOp::reduce_scatter: return c.start_reduce_scatter(vin, vout, coll::ReduceOp::sum, host);
    case CollOp::all_reduce: return c.start_all_reduce(vout, coll::ReduceOp::sum, host);
    case CollOp::all_to_all: return c.start_all_to_all(vin, vout, host);
    case CollOp::broadcast: return c.start_broadcast(vout, root, host);
    default: HZP_THROW(PreconditionError, "the benchmark does not run ", coll::coll_op_name(op));
  }
}

// Fills the inputs, runs the op once, and counts wrong output elements on this rank.
template <typename T>
std::int64_t check_once(coll::Communicator& c, CollOp op, const Shapes& s, DType t, std::byte* in,
                        std::byte* out, int root) {
  const int w = c.size(), r = c.rank();
  T* pin = reinterpret_cast<T*>(in);
  T* pout = reinterpret_cast<T*>(out);
  if (op == CollOp::all_reduce || op == CollOp::broadcast) {
    if (op == CollOp::broadcast && r != root)
      std::fill(pout, pout + s.out, to_elem<T>(-1.0f));  // a broadcast that moves nothing shows up
    else
      fill(pout, s.out, r, 0, w);
  } else {
    fill(pin, s.in, r, 0, w);
    std::fill(pout, pout + s.out, to_elem<T>(-1.0f));
  }
  start(c, op, s, t, in, out, root).wait();
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < s.out; ++i)
    if (static_cast<float>(pout[i]) != expected(op, r, i, s, w, root)) ++wrong;
  return wrong;
}

std::string fixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

}  // namespace

float bench_pattern(int rank, std::size_t i, int nranks) noexcept {
  // Values 0..k-1 with nranks*(k-1) <= 256, so every partial sum is an integer bf16 holds exactly.
  const int k = std::clamp(256 / std::max(nranks, 1), 1, 64);
  const std::uint64_t h = mix((static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(i));
  return static_cast<float>(h % static_cast<std::uint64_t>(k));
}

std::vector<std::size_t> sweep_sizes(const CollectiveBenchOptions& opt, int nranks) {
  if (opt.min_bytes == 0 || opt.max_bytes == 0 || opt.min_bytes > opt.max_bytes)
    HZP_THROW(ConfigError, "--min-bytes ", opt.min_bytes, " and --max-bytes ", opt.max_bytes,
              " must be positive with min <= max");
  if (opt.min_bytes < opt.max_bytes && !(opt.step_factor > 1.0))
    HZP_THROW(ConfigError, "--step-factor ", opt.step_factor, " must be > 1 to go from ", opt.min_bytes,
              " to ", opt.max_bytes, " bytes");
  const std::size_t unit = static_cast<std::size_t>(nranks) * dtype_size(opt.dtype);
  std::vector<std::size_t> out;
  auto push = [&](double b) {
    std::size_t s = static_cast<std::size_t>(b) / unit * unit;
    s = std::max(s, unit);
    if (out.empty() || out.back() != s) out.push_back(s);
  };
  for (double b = static_cast<double>(opt.min_bytes); b < static_cast<double>(opt.max_bytes) * (1 - 1e-12);
       b *= opt.step_factor)
    push(b);
  push(static_cast<double>(opt.max_bytes));
  return out;
}

MemcpyReference measure_memcpy(std::size_t bytes, int repeats, MPI_Comm stats) {
  int rank = 0;
  MPI_Comm_rank(stats, &rank);
  Buffer src = make_buffer(bytes), dst = make_buffer(bytes);
  std::memset(src.get(), 0x5a, bytes);
  volatile std::byte sink{};
  auto best_of = [&] {
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < std::max(repeats, 1); ++k) {
      const double t0 = wall_seconds();
      std::memcpy(dst.get(), src.get(), bytes);
      best = std::min(best, wall_seconds() - t0);
      sink = dst[bytes / 2];  // keeps the copy observable
    }
    return static_cast<double>(bytes) / best / 1e9;
  };
  MemcpyReference ref;
  ref.bytes = bytes;
  // Rank 0 alone: the others wait in a yielding barrier so they leave its core and memory bus alone.
  stats_barrier(stats);
  double alone = rank == 0 ? best_of() : 0.0;
  stats_barrier(stats);
  ref.one_core_gbps = stats_reduce(alone, MPI_DOUBLE, MPI_MAX, stats);
  // Every rank at once: what each core gets while its peers copy too (as they do in a collective).
  stats_barrier(stats);
  const double together = best_of();
  ref.all_ranks_gbps = stats_reduce(together, MPI_DOUBLE, MPI_MIN, stats);
  (void)sink;
  return ref;
}

std::vector<CollectiveBenchRow> run_collective_bench(
    coll::Communicator& comm, MPI_Comm stats, const CollectiveBenchOptions& opt, const MemcpyReference& mref,
    const std::function<void(const CollectiveBenchRow&)>& on_row) {
  const int w = comm.size();
  HZP_CHECK(opt.iters >= 1 && opt.warmup_iters >= 0, "iters ", opt.iters, " must be >= 1 and warm-up ",
            opt.warmup_iters, " >= 0");
  HZP_CHECK(opt.root >= 0 && opt.root < w, "broadcast root ", opt.root, " outside 0..", w - 1);
  const std::vector<std::size_t> sizes = sweep_sizes(opt, w);
  // The op's buffers are shared memory, as a caller that wants one copy between ranks of a machine allocates
  // them (collectives.mapped_buffers); touched once here, so no page fault is timed. The memcpy reference keeps
  // private memory.
  coll::SharedBuffer in = coll::SharedBuffer::allocate(sizes.back()), out = coll::SharedBuffer::allocate(sizes.back());
  std::memset(in.data(), 0, in.size());
  std::memset(out.data(), 0, out.size());

  std::vector<CollectiveBenchRow> rows;
  std::vector<double> times(static_cast<std::size_t>(opt.iters));
  for (CollOp op : opt.ops) {
    for (std::size_t bytes : sizes) {
      const Shapes s = shapes_for(op, bytes, opt.dtype, w);
      CollectiveBenchRow row;
      row.op = op;
      row.dtype = opt.dtype;
      row.count = s.count;
      // Correctness once per size, outside the timed loop; the timed loop then reuses the buffers.
      const std::int64_t wrong = opt.dtype == DType::bf16
                                     ? check_once<bf16>(comm, op, s, opt.dtype, in.data(), out.data(), opt.root)
                                     : check_once<float>(comm, op, s, opt.dtype, in.data(), out.data(), opt.root);
      for (int k = 0; k < opt.warmup_iters; ++k) start(comm, op, s, opt.dtype, in.data(), out.data(), opt.root).wait();
      stats_barrier(stats);
      for (int k = 0; k < opt.iters; ++k) {
        const double t0 = wall_seconds();
        start(comm, op, s, opt.dtype, in.data(), out.data(), opt.root).wait();
        times[static_cast<std::size_t>(k)] = wall_seconds() - t0;
      }
      double mean = 0;
      for (double t : times) mean += t;
      mean /= opt.iters;
      const auto [mn, mx] = std::minmax_element(times.begin(), times.end());
      const double min_t = *mn, max_t = *mx;
      row.p50_us = slowest_median_us(times, stats);
      row.time_us = stats_reduce(mean, MPI_DOUBLE, MPI_MAX, stats) * 1e6;
      row.min_us = stats_reduce(min_t, MPI_DOUBLE, MPI_MIN, stats) * 1e6;
      row.max_us = stats_reduce(max_t, MPI_DOUBLE, MPI_MAX, stats) * 1e6;
      row.wrong = stats_reduce<std::int64_t>(wrong, MPI_INT64_T, MPI_SUM, stats);
      // algbw bytes from the shared descriptor (types.hpp), given the per-rank *input* element count.
      row.bytes = coll::algbw_bytes(op, s.in, opt.dtype, w);
      row.algbw_gbps = static_cast<double>(row.bytes) / (row.time_us * 1e-6) / 1e9;
      row.busbw_gbps = row.algbw_gbps * coll::bus_factor(op, w);
      auto busbw_at = [&](double us) {
        return static_cast<double>(row.bytes) / (us * 1e-6) / 1e9 * coll::bus_factor(op, w);
      };
      row.busbw_p50_gbps = busbw_at(row.p50_us);
      row.bus_over_memcpy = mref.one_core_gbps > 0 ? row.busbw_gbps / mref.one_core_gbps : 0.0;
      if (opt.traffic_floor) {
        // Every rank runs the floor at once, as they ran the op: they share the memory bus alike.
        const std::size_t total = bytes / dtype_size(opt.dtype);
        run_traffic_floor(op, opt.dtype, total, w, comm.rank(), opt.root, in.data(), out.data());  // warm-up
        stats_barrier(stats);
        for (int k = 0; k < opt.iters; ++k) {
          const double t0 = wall_seconds();
          run_traffic_floor(op, opt.dtype, total, w, comm.rank(), opt.root, in.data(), out.data());
          times[static_cast<std::size_t>(k)] = wall_seconds() - t0;
        }
        row.floor_p50_us = slowest_median_us(times, stats);
        row.floor_busbw_gbps = busbw_at(row.floor_p50_us);
        row.bus_over_floor = row.floor_busbw_gbps > 0 ? row.busbw_p50_gbps / row.floor_busbw_gbps : 0.0;
      }
      rows.push_back(row);
      if (on_row) on_row(row);
    }
  }
  return rows;
}

std::string format_bench_header() {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "#%11s %10s %4s %-14s %10s %10s %10s %10s %8s %8s %7s %7s %6s\n"
                "#%11s %10s %4s %-14s %10s %10s %10s %10s %8s %8s %7s %7s %6s\n",
                "size", "count", "type", "op", "time", "p50", "min", "max", "algbw", "busbw", "bus/mcp", "bus/flr",
                "#wrong", "(B)", "(elements)", "", "", "(us)", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(p50)",
                "");
  return buf;
}

std::string format_bench_row(const CollectiveBenchRow& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%12zu %10zu %4s %-14s %10.2f %10.2f %10.2f %10.2f %8.3f %8.3f %6.1f%% %6.1f%% %6lld\n", r.bytes,
                r.count, std::string(dtype_name(r.dtype)).c_str(), std::string(coll::coll_op_name(r.op)).c_str(),
                r.time_us, r.p50_us, r.min_us, r.max_us, r.algbw_gbps, r.busbw_gbps, 100.0 * r.bus_over_memcpy,
                100.0 * r.bus_over_floor, static_cast<long long>(r.wrong));
  return buf;
}

std::string format_bench_csv_header() {
  return "op,dtype,ranks,size_bytes,count,time_us,p50_us,min_us,max_us,algbw_gbps,busbw_gbps,busbw_p50_gbps,"
         "memcpy_gbps,busbw_over_memcpy,floor_p50_us,floor_busbw_gbps,busbw_over_floor,wrong\n";
}

std::string format_bench_csv_row(const CollectiveBenchRow& r, int nranks, double memcpy_gbps) {
  std::string s;
  s += std::string(coll::coll_op_name(r.op)) + "," + std::string(dtype_name(r.dtype)) + "," +
       std::to_string(nranks) + "," + std::to_string(r.bytes) + "," + std::to_string(r.count) + "," +
       fixed(r.time_us, 3) + "," + fixed(r.p50_us, 3) + "," + fixed(r.min_us, 3) + "," + fixed(r.max_us, 3) + "," +
       fixed(r.algbw_gbps, 4) + "," + fixed(r.busbw_gbps, 4) + "," + fixed(r.busbw_p50_gbps, 4) + "," + fixed(memcpy_gbps, 4) + "," + fixed(r.bus_over_memcpy, 4) + "," + fixed(r.floor_p50_us, 3) + "," +
       fixed(r.floor_busbw_gbps, 4) + "," + fixed(r.bus_over_floor, 4) + "," +
       std::to_string(r.wrong) + "\n";
  return s;
}

}  // namespace hzp::harness
