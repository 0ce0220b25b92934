// Every configuration key hzpbench accepts, in one table. To add keys, append a section to
// register_keys() below (keep sections in layer order), register only keys whose consumer exists, and
// regenerate docs/options.md (`build/bin/hzpbench list --markdown > docs/options.md`; the CTest test
// options_doc_up_to_date fails until you do). Presets: table.add_preset(...) after their keys.
#include "hzp/harness/option_keys.hpp"

#include "hzp/harness/model_options.hpp"
#include "hzp/harness/run_options.hpp"

namespace hzp::harness {
namespace {

using S = OptionSpec;

void register_keys(OptionTable& t) {
  // ---- topology: who the ranks are and how they group into nodes (collectives/topology) ----------
  t.add(S::integer("topology.world_size", 0,
                   "Number of ranks; 0 = take it from MPI. When set, a run checks it against the MPI "
                   "world size, and tools that plan without MPI use it")
            .non_negative()
            .with_unit("ranks"));
  t.add(S::integer("topology.ranks_per_node", 0,
                   "Ranks per node (consecutive ranks share a node and its intra-node link); 0 = from "
                   "the machine (MPI shared-memory split, or Slurm). Set it to make virtual nodes on "
                   "one machine")
            .non_negative()
            .with_unit("ranks"));

  // ---- collectives: backend, algorithms and how ranks wait (collectives/) ------------------------
  // nccl joins the allowed values with the CUDA backend, unconditionally (refused at run time when not
  // built), so that docs/options.md is the same for every build.
  t.add(S::enumeration("collectives.backend", {"mpi"}, "mpi",
                       "Communication backend: mpi = MPICH on host buffers"));
  t.add(S::boolean("collectives.mpi_native", false,
                   "false = hzpbench's ring and latency-optimal algorithms over nonblocking "
                   "point-to-point (bytes per link observed); true = MPICH's own collectives (bytes "
                   "per link then modelled)"));
  t.add(S::enumeration("collectives.wait_policy", {"yield", "backoff", "mixed"}, "mixed",
                       "How a rank waits on nonblocking MPI: yield = test + sched_yield (best inline "
                       "at few ranks); backoff = test + exponential sleep up to "
                       "collectives.backoff_max_us (best on oversubscribed cores); mixed = yield "
                       "first, then back off while the wait lasts"));
  t.add(S::real("collectives.backoff_max_us", 50,
                "Longest sleep of the backoff wait (sleeps double from 1 us up to this)")
            .positive()
            .with_unit("us"));
  t.add(S::real("collectives.timeout_s", 300,
                "Deadline of every wait on communication; passing it raises a timeout error naming "
                "the operation, so a hang becomes an error")
            .positive()
            .with_unit("s"));
  t.add(S::enumeration("collectives.transport", {"auto", "mpi", "shm"}, "auto",
                       "What carries hops between ranks on one machine (virtual nodes included; counters "
                       "and link emulation are the same either way): shm = shared-memory rings of "
                       "collectives.shm_slots slots per direction; mpi = MPI point-to-point (MPICH copies "
                       "twice); auto = shm when available and collectives.mpi_native is false, else mpi"));
  t.add(S::integer("collectives.shm_slot_bytes", 262144,
                   "Bytes per slot of the shared-memory rings (a multiple of 4096); messages stream "
                   "through them in chunks of this size")
            .in_range(4096, 67108864)
            .with_unit("bytes"));
  t.add(S::integer("collectives.shm_slots", 4,
                   "Slots per direction of each pair of ranks in the shared-memory rings")
            .in_range(2, 64));
  t.add(S::integer("collectives.small_message_bytes", 65536,
                   "Messages smaller than this use the latency-optimal algorithm (fewer rounds), "
                   "larger ones the bandwidth-optimal ring; 0 = always the ring")
            .non_negative()
            .with_unit("bytes"));

  // ---- links: emulated latency and bandwidth per level (collectives/ link emulation) -------------
  // Bandwidth defaults keep an H100 cluster's communication-to-compute ratio on one CPU core at
  // ~75 GFLOP/s (docs/environment.md): ~2.2k FLOP per byte inside a node (NVLink), ~20k across nodes
  // (InfiniBand). Latencies are not scaled the same way (that would be tens of ms per message); they
  // are set above this machine's own oversubscribed MPI latency (~33 us) so that the emulated value,
  // not the machine, is what a run sees.
  t.add(S::boolean("links.emulate", false,
                   "Emulate the links below: a collective then takes at least its modelled time per "
                   "level (the remainder after the real transfer is slept)"));
  t.add(S::real("links.intra.latency_us", 50, "Emulated latency of one message inside a node")
            .non_negative()
            .with_unit("us"));
  t.add(S::real("links.intra.bandwidth_gbps", 0.036,
                "Emulated bandwidth inside a node, in GB/s (gigabytes, not gigabits); 0.036 = 36 MB/s "
                "keeps an H100 node's ~2.2k FLOP per NVLink byte on a ~75 GFLOP/s CPU core")
            .positive()
            .with_unit("GB/s"));
  t.add(S::real("links.inter.latency_us", 200, "Emulated latency of one message between nodes")
            .non_negative()
            .with_unit("us"));
  t.add(S::real("links.inter.bandwidth_gbps", 0.004,
                "Emulated bandwidth between nodes, in GB/s (gigabytes, not gigabits); 0.004 = 4 MB/s "
                "keeps an H100 cluster's ~20k FLOP per InfiniBand byte on a ~75 GFLOP/s CPU core")
            .positive()
            .with_unit("GB/s"));

  // ---- model, train, data, and the model presets: registered beside their configs (model_options.cpp)
  register_model_keys(t);

  // ---- scheduler.* of the data-parallel schedulers (issue 7; schedulers/data_parallel.hpp): read by
  // scheduler_options_from() for `hzpbench plan` and the schedulers the run loop builds
  t.add(S::real("scheduler.bucket_mb", 25,
                "ddp: gradient bucket size; buckets are whole units, formed from the last unit backwards, and "
                "each is all-reduced as soon as its gradients are final on the last micro-batch")
            .positive()
            .with_unit("MiB"));
  t.add(S::boolean("scheduler.overlap", true,
                   "ddp: start each bucket's all-reduce non-blocking and wait for all at the end of backward "
                   "(true), or all-reduce each bucket inline, blocking (false)"));
  t.add(S::integer("scheduler.group_size", 0,
                   "hsdp: sharding group size Z (contiguous ranks, inside a node when Z = "
                   "topology.ranks_per_node), replicated across W/Z groups; must divide the world size; "
                   "0 = the world (zero3)")
            .non_negative());
  // ---- scheduler.* of asynchzp (issue 9; schedulers/asynchzp.hpp, docs/data-parallel.md "asynchzp")
  t.add(S::integer("scheduler.z1", 0,
                   "asynchzp: optimizer-state group size (fp32 master, m, v sharded over z1 contiguous ranks); "
                   "must divide the world size; 0 = the world")
            .non_negative());
  t.add(S::integer("scheduler.z2", 0,
                   "asynchzp: gradient group size (fp32 reduce-scatter per micro-batch); must divide "
                   "scheduler.z1; 0 = z1")
            .non_negative());
  t.add(S::integer("scheduler.z3", 0,
                   "asynchzp: parameter group size (all-gather per unit per micro-batch, forward and again "
                   "backward); must divide scheduler.z2; 0 = z2. z2 = z3 = topology.ranks_per_node keeps every "
                   "per-micro-batch collective inside a node")
            .non_negative());
  t.add(S::enumeration("scheduler.step_end", {"allreduce", "reduce_scatter"}, "allreduce",
                       "asynchzp: how gradient shards are combined across the W/z2 replicas at the end of a step: "
                       "one all-reduce (the paper), or a reduce-scatter to W-th pieces and an all-gather among the "
                       "W/z1 ranks holding the same optimizer slice"));
  t.add(S::boolean("scheduler.async", true,
                   "asynchzp: issue the collectives from two background threads with their own communicators "
                   "(true), or inline on the compute thread (false: the paper's Table 3 ablation)"));
  t.add(S::integer("scheduler.prefetch", 2,
                   "asynchzp (async): parameter all-gathers queued ahead of the unit being computed, in units; "
                   "the pool's all_gather ring bounds it too")
            .positive());
  t.add(S::enumeration("scheduler.launch", {"unit", "tensor"}, "unit",
                       "asynchzp: one collective per unit, or one per parameter tensor (the paper's granularity; "
                       "each tensor sharded and padded on its own)"));
  t.add(S::real("scheduler.pool_mb", 0,
                "asynchzp (async): the persistent communication ring pool (rings all_gather, "
                "all_gather.shared, reduce_scatter, reduce_scatter.shared); 0 = sized from scheduler.prefetch "
                "and the largest units")
            .non_negative()
            .with_unit("MiB"));
  t.add(S::enumeration("scheduler.pool_fallback", {"error", "inline"}, "error",
                       "asynchzp (async): a unit whose block does not fit its ring is a configuration error, or is "
                       "gathered / reduce-scattered inline from the caching allocator and counted"));

  // ---- hzpbench run: scheduler, backend, device, link profiles, output, harness, debug (run_options.cpp)
  register_run_keys(t);
}

OptionTable build_table() {
  OptionTable t("run 'hzpbench list' to see every key");
  register_keys(t);
  return t;
}

}  // namespace

const OptionTable& hzpbench_options() {
  static const OptionTable table = build_table();
  return table;
}

}  // namespace hzp::harness
