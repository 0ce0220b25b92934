// `hzpbench collectives`: the collective benchmark (run under mpiexec) in nccl-tests' conventions,
// over the MPI backend configured from the option table (collectives.*, links.*, topology.*). Rank 0
// prints the table (and --csv writes it); every run is bounded by its flags (--max-bytes, --iters),
// so `timeout` never has to kill it. The measurement itself is collective_bench.cpp.
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "collective_bench.hpp"
#include "commands.hpp"
#include "run_setup.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology_mpi.hpp"
#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

struct Args {
  ConfigArgs config;
  std::string ops = "all_gather,reduce_scatter,all_reduce,all_to_all,broadcast";
  std::string dtype = "fp32";
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 64u << 20;
  double step_factor = 2.0;
  int iters = 20;
  int warmup_iters = 5;
  int root = 0;
  std::string csv;
};

std::vector<coll::CollOp> parse_ops(const std::string& list) {
  static constexpr coll::CollOp kBenchOps[] = {coll::CollOp::all_gather, coll::CollOp::reduce_scatter,
                                               coll::CollOp::all_reduce, coll::CollOp::all_to_all,
                                               coll::CollOp::broadcast};
  std::vector<coll::CollOp> ops;
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) {
    bool found = false;
    for (coll::CollOp op : kBenchOps)
      if (coll::coll_op_name(op) == name) {
        ops.push_back(op);
        found = true;
      }
    if (!found)
      HZP_THROW(ConfigError, "--ops: unknown operation '", name,
                "'; choose from all_gather, reduce_scatter, all_reduce, all_to_all, broadcast");
  }
  if (ops.empty()) HZP_THROW(ConfigError, "--ops is empty");
  return ops;
}

// MPI lives for the duration of the command; initialised here unless someone already did.
class MpiSession {
 public:
  MpiSession() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // Background communication threads elsewhere need MULTIPLE; the benchmark itself is serial.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      owned_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    set_process_rank(rank_);
  }
  ~MpiSession() {
    if (owned_) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  bool owned_ = false;
  int rank_ = 0, size_ = 1;
};

int run_collectives(const Args& a) {
  // Everything a user can get wrong is checked before MPI starts, identically on every rank.
  const ResolvedConfig cfg = a.config.resolve();
  const coll::MpiCommConfig comm_config = mpi_comm_config_from(cfg);
  comm_config.validate();
  CollectiveBenchOptions opt;
  opt.ops = parse_ops(a.ops);
  const auto dt = parse_dtype(a.dtype);
  if (!dt || (*dt != DType::f32 && *dt != DType::bf16))
    HZP_THROW(ConfigError, "--dtype '", a.dtype, "': choose fp32 or bf16");
  opt.dtype = *dt;
  opt.min_bytes = a.min_bytes;
  opt.max_bytes = a.max_bytes;
  opt.step_factor = a.step_factor;
  opt.iters = a.iters;
  opt.warmup_iters = a.warmup_iters;
  opt.root = a.root;
  (void)sweep_sizes(opt, 1);  // validates the sweep flags

  MpiSession mpi;
  try {
    const auto want_w = cfg.get_int("topology.world_size");
    if (want_w != 0 && want_w != mpi.size())
      HZP_THROW(ConfigError, "topology.world_size = ", want_w, " but mpiexec started ", mpi.size(),
                " ranks; set it to ", mpi.size(), " or 0 (= from MPI)");
    const coll::Topology topo =
        coll::discover_topology(MPI_COMM_WORLD, cfg.get_int32("topology.ranks_per_node"));
    std::unique_ptr<coll::MpiCommunicator> mpi_world = coll::make_mpi_world(topo, comm_config);
    const std::string transport(coll::transport_name(mpi_world->transport()));
    const bool mapped = mpi_world->mapped_buffers();
    std::unique_ptr<coll::Communicator> world = std::move(mpi_world);
    // The benchmark's own reductions run on a separate communicator so they never show in the
    // measured communicator's counters (docs/architecture.md, Communicator: the harness's traffic is kept apart).
    MPI_Comm stats = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &stats);
    HZP_CHECK(opt.root < mpi.size(), "--root ", opt.root, " is outside 0..", mpi.size() - 1);

    const MemcpyReference mref = measure_memcpy(sweep_sizes(opt, mpi.size()).back(), opt.memcpy_repeats, stats);
    const bool printer = mpi.rank() == 0;
    if (printer) {
      std::printf("# hzpbench collectives (nccl-tests conventions, docs/collectives-benchmark.md)\n");
      std::printf("# ranks %d: %s\n", mpi.size(), topo.summary().c_str());
      std::printf("# backend mpi: mpi_native=%s wait_policy=%s small_message_bytes=%lld links.emulate=%s\n",
                  cfg.get_bool("collectives.mpi_native") ? "true" : "false",
                  cfg.get_string("collectives.wait_policy").c_str(),
                  static_cast<long long>(cfg.get_int("collectives.small_message_bytes")),
                  cfg.get_bool("links.emulate") ? "true" : "false");
      std::printf("# transport (hops inside a machine): %s (collectives.transport=%s, shm_slots=%d x %zu B, "
                  "mapped buffers %s)\n",
                  transport.c_str(), cfg.get_string("collectives.transport").c_str(), comm_config.shm_slots,
                  comm_config.shm_slot_bytes, mapped ? "on: one copy" : "off");
      std::printf("# sweep %zu..%zu B, factor %g, warm-up %d, iters %d, dtype %s, ops %s\n", opt.min_bytes,
                  opt.max_bytes, opt.step_factor, opt.warmup_iters, opt.iters, a.dtype.c_str(), a.ops.c_str());
      std::printf("# memcpy of %zu B, best of %d: %.3f GB/s on one core alone (bus/mcp = busbw / this); "
                  "%.3f GB/s per core with all %d ranks copying at once\n#\n",
                  mref.bytes, opt.memcpy_repeats, mref.one_core_gbps, mref.all_ranks_gbps, mpi.size());
      std::fputs(format_bench_header().c_str(), stdout);
      std::fflush(stdout);
    }
    coll::CollOp last_op = opt.ops.front();
    const auto rows = run_collective_bench(*world, stats, opt, mref, [&](const CollectiveBenchRow& r) {
      if (!printer) return;
      if (r.op != last_op) std::fputs("#\n", stdout);
      last_op = r.op;
      std::fputs(format_bench_row(r).c_str(), stdout);
      std::fflush(stdout);
    });
    // Measured again at the end: on a shared machine memory bandwidth drifts with the neighbours'
    // load, and a large drift says the ratios above are uncertain by about that much.
    const MemcpyReference mref_end = measure_memcpy(mref.bytes, opt.memcpy_repeats, stats);
    MPI_Comm_free(&stats);

    std::int64_t wrong = 0;
    for (const auto& r : rows) wrong += r.wrong;
    if (printer) {
      std::printf("#\n# #wrong total: %lld%s\n", static_cast<long long>(wrong),
                  wrong == 0 ? " (every result exact)" : " (RESULTS WRONG)");
      std::printf("# memcpy again at the end: %.3f GB/s on one core alone (%+.0f%% from the start; "
                  "bus/mcp uses the start)\n",
                  mref_end.one_core_gbps, 100.0 * (mref_end.one_core_gbps / mref.one_core_gbps - 1.0));
      for (coll::CollOp op : opt.ops) {
        // The figure of merit: mean busbw over sizes >= 1 MiB, as a share of memcpy.
        // The p50 figure beside it discounts iterations where a rank was descheduled.
        // Beside it, the share of the op's traffic floor (what this machine's memory allows the op
        // with every rank copying at once) and the floor's own share of memcpy: where the floor is
        // below a goal stated against memcpy, no transport can reach that goal here.
        double sum = 0, sum50 = 0, floor = 0, of_floor = 0;
        int n = 0;
        for (const auto& r : rows)
          if (r.op == op && r.bytes >= (1u << 20)) {
            sum += r.busbw_gbps;
            sum50 += r.busbw_p50_gbps;
            floor += r.floor_busbw_gbps;
            of_floor += r.bus_over_floor;
            ++n;
          }
        if (n > 0)
          std::printf("# %-14s busbw averaged over sizes >= 1 MiB: %.3f GB/s = %.1f%% of memcpy "
                      "(from p50 times: %.3f GB/s = %.1f%%); %.1f%% of its traffic floor, whose busbw is "
                      "%.1f%% of memcpy\n",
                      std::string(coll::coll_op_name(op)).c_str(), sum / n, 100.0 * sum / n / mref.one_core_gbps,
                      sum50 / n, 100.0 * sum50 / n / mref.one_core_gbps, 100.0 * of_floor / n,
                      100.0 * floor / n / mref.one_core_gbps);
      }
      if (!a.csv.empty()) {
        std::ofstream f(a.csv);
        if (!f) HZP_THROW(IoError, "cannot write --csv file '", a.csv, "'");
        f << format_bench_csv_header();
        for (const auto& r : rows) f << format_bench_csv_row(r, mpi.size(), mref.one_core_gbps);
        if (!f) HZP_THROW(IoError, "writing --csv file '", a.csv, "' failed");
        std::printf("# csv: %s\n", a.csv.c_str());
      }
    }
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    // Peers may be inside a collective this rank will never join: print once here and abort the
    // job rather than leave them waiting for their deadline.
    std::fprintf(stderr, "hzpbench collectives: rank %d: %s\n", mpi.rank(), e.what());
    std::fflush(stderr);
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 2);
    throw;
  }
}

}  // namespace

Command add_collectives_command(CLI::App& app) {
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "collectives", "Collective benchmark over the MPI backend (run under mpiexec), nccl-tests conventions");
  add_config_options(*sub, args->config);
  auto* ops = sub->add_option("--ops", args->ops, "Comma-separated operations to run, in this order");
  ops->capture_default_str();
  sub->add_option("--dtype", args->dtype, "Element type: fp32 or bf16")->capture_default_str();
  // Sizes accept 1024, 1K, 64M, 1G (binary multiples, like nccl-tests' -b/-e).
  sub->add_option("-b,--min-bytes", args->min_bytes, "Smallest size (B) of the sweep")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sub->add_option("-e,--max-bytes", args->max_bytes, "Largest size (B) of the sweep; also the memcpy size")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sub->add_option("-f,--step-factor", args->step_factor, "Multiply the size by this between rows")
      ->capture_default_str();
  sub->add_option("-n,--iters", args->iters, "Timed iterations per size")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sub->add_option("-w,--warmup-iters", args->warmup_iters, "Untimed iterations per size before timing")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  sub->add_option("--root", args->root, "Root rank of broadcast")->capture_default_str();
  sub->add_option("--csv", args->csv, "Rank 0 also writes the table to this CSV file")->type_name("FILE");
  sub->footer(
      "Example: mpiexec -n 2 build/bin/hzpbench collectives --max-bytes 64M --ops all_gather,reduce_scatter\n");
  return {sub, [args] { return run_collectives(*args); }};
}

}  // namespace hzp::harness
