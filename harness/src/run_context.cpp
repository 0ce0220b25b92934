// MPI session, topology and communicators, thread settings and provenance of a run (run_context.hpp).
#include "run_context.hpp"

#include <cblas.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "blas_core.hpp"
#include "hzp/collectives/topology_mpi.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/intra_op.hpp"

namespace hzp::harness {

MpiSession::MpiSession() {
  int inited = 0;
  MPI_Initialized(&inited);
  int provided = MPI_THREAD_MULTIPLE;
  if (!inited) {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    owned_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  set_process_rank(rank_);
  if (provided < MPI_THREAD_MULTIPLE)
    HZP_THROW(MpiError, "the MPI library provides thread level ", provided,
              " but hzpbench run needs MPI_THREAD_MULTIPLE (its results thread and watchdog call MPI)");
}

MpiSession::~MpiSession() {
  if (owned_) MPI_Finalize();
}

RunContext RunContext::create(const RunSetup& setup, int ranks_per_node, int phantom_world, int phantom_rank) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const bool phantom = phantom_world > 0;
  RunContext c{phantom ? phantom_rank : rank,
               phantom ? phantom_world : size,
               phantom ? coll::Topology::virtual_nodes(phantom_world, ranks_per_node > 0 ? ranks_per_node : phantom_world,
                                                       phantom_rank)
                       : coll::discover_topology(MPI_COMM_WORLD, ranks_per_node),
               nullptr, nullptr, {}, rank, phantom};
  // The harness's own traffic: never emulated (it is not the cluster's), counted apart.
  coll::MpiCommConfig hc = setup.comm;
  hc.links.enabled = false;
  hc.mpi_native = false;
  c.harness = phantom ? coll::make_phantom_world(c.topology, hc, c.rank, "harness")
                      : coll::make_mpi_world(c.topology, hc, MPI_COMM_WORLD, "harness");
  c.control = std::make_unique<ControlChannel>(MPI_COMM_WORLD);

  MPI_Comm machine = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &machine);
  MPI_Comm_size(machine, &c.threads.ranks_on_machine);
  MPI_Comm_rank(machine, &c.threads.machine_rank);
  MPI_Comm_free(&machine);
  c.threads.cores = affinity_cpus();
  c.threads.openblas_set = set_compute_threads(setup, c.threads.ranks_on_machine);
  c.threads.openblas = openblas_get_num_threads();
  c.threads.intra_op = core::intra_op_threads();
  return c;
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

bool set_compute_threads(const RunSetup& setup, int ranks_on_machine) {
  const bool env_set = std::getenv("OPENBLAS_NUM_THREADS") != nullptr || std::getenv("OMP_NUM_THREADS") != nullptr;
  const int online = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const int n = openblas_threads_for(affinity_cpus(), online, ranks_on_machine, setup.train.deterministic, env_set);
  if (n > 0) openblas_set_num_threads(n);
  // The pool takes the rank's threads over from OpenBLAS: one set of threads for GEMMs and the other kernels,
  // instead of OpenBLAS's workers spinning while the compute thread runs attention or the optimizer alone.
  if (const int threads = openblas_get_num_threads(); setup.opt.intra_op_pool && threads > 1) {
    core::set_intra_op_threads(threads);
    openblas_set_num_threads(1);
  }
  return n > 0;
}

int openblas_threads_for(int affinity_cpus, int online_cpus, int ranks_on_machine, bool deterministic, bool env_set) {
  if (deterministic) return 1;
  if (env_set) return 0;
  if (affinity_cpus < online_cpus) return std::max(1, affinity_cpus);  // the launcher bound this rank
  return std::max(1, online_cpus / std::max(1, ranks_on_machine));
}

RunInfo make_run_info(const std::vector<std::string>& argv, const ResolvedConfig& config, const RunSetup& setup,
                      const RunContext& ctx, const workloads::DataSource& source) {
  RunInfo info;
  info.argv = argv;
  info.config_toml = config.to_toml(true);
  info.world_size = ctx.world_size;
  info.topology = ctx.topology.describe();
  info.backend = setup.opt.backend;
  info.threads = {{"openblas", std::int64_t{ctx.threads.openblas}},
                  {"intra_op", std::int64_t{ctx.threads.intra_op}},
                  {"openblas_set_by_harness", std::int64_t{ctx.threads.openblas_set}},
                  {"openblas_core", blas_core_name()},
                  {"openblas_one_thread_deterministic", std::int64_t{setup.train.deterministic}},
                  {"cores", std::int64_t{ctx.threads.cores}},
                  {"ranks_on_machine", std::int64_t{ctx.threads.ranks_on_machine}},
                  {"mpi_thread_level", std::string("MPI_THREAD_MULTIPLE")},
                  {"wait_policy", std::string(coll::wait_policy_name(setup.comm.wait_policy))},
                  {"background_comm_threads", std::int64_t{0}}};
  for (const auto& [k, v] : source.provenance()) info.data.emplace_back(k, v);
  return info;
}

std::string broadcast_string(coll::Communicator& comm, std::string text) {
  std::int64_t n = static_cast<std::int64_t>(text.size());
  comm.broadcast(TensorView(&n, Shape{1}, DType::i64), 0, StreamRef::host());
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) comm.broadcast(TensorView(text.data(), Shape{n}, DType::u8), 0, StreamRef::host());
  return text;
}

double all_reduce_sum(coll::Communicator& comm, double value) {
  comm.all_reduce(TensorView(&value, Shape{1}, DType::f64), coll::ReduceOp::sum, StreamRef::host());
  return value;
}

double all_reduce_max(coll::Communicator& comm, double value) {
  comm.all_reduce(TensorView(&value, Shape{1}, DType::f64), coll::ReduceOp::max, StreamRef::host());
  return value;
}

}  // namespace hzp::harness
