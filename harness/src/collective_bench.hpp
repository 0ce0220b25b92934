// The collective benchmark behind `hzpbench collectives`, in nccl-tests' conventions
// (docs/collectives-benchmark.md): a size sweep per op, warm-up then timed iterations, the time of a
// size = max over ranks of each rank's per-iteration mean, algbw/busbw with the factors of
// collectives/types.hpp, and #wrong from an exactly verifiable input pattern checked once per size
// outside the timed loop. Backend-neutral: it drives any Communicator.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hzp/collectives/communicator.hpp"

namespace hzp::harness {

struct CollectiveBenchOptions {
  std::vector<coll::CollOp> ops;   // in the order they run and print
  DType dtype = DType::f32;
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 64u << 20;
  double step_factor = 2.0;
  int iters = 20;
  int warmup_iters = 5;
  int root = 0;                    // broadcast root
  int memcpy_repeats = 5;          // best-of for the memcpy reference
  bool traffic_floor = true;       // time each op's traffic floor after it (traffic_floor.hpp)
};

/// One row of the table: one op at one size.
struct CollectiveBenchRow {
  coll::CollOp op{};
  DType dtype = DType::f32;
  std::size_t bytes = 0;           // nccl-tests "size": algbw_bytes of the op (the larger buffer)
  std::size_t count = 0;           // elements per rank: the shard (all_gather, reduce_scatter) or buffer
  double time_us = 0;              // max over ranks of the per-iteration mean
  double p50_us = 0;               // max over ranks of the per-rank median (robust to descheduling)
  double min_us = 0, max_us = 0;   // fastest and slowest single iteration on any rank
  double algbw_gbps = 0, busbw_gbps = 0;
  double bus_over_memcpy = 0;      // busbw / single-core memcpy bandwidth
  double busbw_p50_gbps = 0;       // busbw from p50_us instead of the mean
  double floor_p50_us = 0;         // the op's traffic floor (traffic_floor.hpp), every rank at once: max p50
  double floor_busbw_gbps = 0;     // busbw at the floor's time: the most this machine allows the op
  double bus_over_floor = 0;       // busbw_p50 / floor_busbw (= floor_p50_us / p50_us)
  std::int64_t wrong = 0;          // elements differing from the exact result, summed over ranks
};

/// Memory-copy references measured in the same run (GB/s = 1e9 bytes/s, bytes copied / time).
struct MemcpyReference {
  std::size_t bytes = 0;
  double one_core_gbps = 0;        // rank 0 copying alone (the others wait): the ratio's denominator
  double all_ranks_gbps = 0;       // min over ranks while every rank copies at once
};

/// The sizes of the sweep: min_bytes, min_bytes*factor, ... up to max_bytes (max_bytes itself always
/// included), each rounded down to a multiple of nranks * dtype size (at least one element per rank),
/// duplicates dropped. Throws ConfigError for min > max, factor <= 1 with min < max, or zero sizes.
std::vector<std::size_t> sweep_sizes(const CollectiveBenchOptions& opt, int nranks);

/// Collective over `stats` (MPI, the harness's own communicator: the benchmark's reductions must not
/// show in the measured communicator's counters). Measures MemcpyReference at `bytes`.
MemcpyReference measure_memcpy(std::size_t bytes, int repeats, MPI_Comm stats);

/// Runs every op at every size on `comm` (collective: every rank calls it with the same options) and
/// returns the rows on every rank (stats reduced over `stats`, which must hold the same ranks in
/// the same order). `on_row` is called on every rank as each row completes (rank 0 prints it).
std::vector<CollectiveBenchRow> run_collective_bench(coll::Communicator& comm, MPI_Comm stats,
                                                     const CollectiveBenchOptions& opt,
                                                     const MemcpyReference& memcpy_ref,
                                                     const std::function<void(const CollectiveBenchRow&)>& on_row);

/// The input value of element i on rank r: small integers (exact in fp32 and bf16, and so are their
/// sums over nranks ranks) from a hash of (r, i), so a misplaced block is caught, not only a wrong sum.
float bench_pattern(int rank, std::size_t i, int nranks) noexcept;

/// Table header lines and one row, in nccl-tests' column order; the CSV header and one CSV row.
std::string format_bench_header();
std::string format_bench_row(const CollectiveBenchRow& row);
std::string format_bench_csv_header();
std::string format_bench_csv_row(const CollectiveBenchRow& row, int nranks, double memcpy_gbps);

}  // namespace hzp::harness
