// Every configuration key hzpbench accepts, in one table. To add keys, append a section to
// register_keys() below (keep sections in layer order), register only keys whose consumer exists, and
// regenerate docs/options.md (`build/bin/hzpbench list --markdown > docs/options.md`; the CTest test
// options_doc_up_to_date fails until you do). Presets: table.add_preset(...) after their keys.
#include "hzp/harness/option_keys.hpp"

#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/core/enum_option.hpp"
#include "hzp/harness/model_options.hpp"
#include "hzp/harness/run_options.hpp"
#include "hzp/schedulers/scheduler_options.hpp"

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
  t.add(S::integer("topology.phantom_world", 0,
                   "Phantom peers (docs/phantom.md): W > 0 runs this one process as rank topology.phantom_rank "
                   "of a W-rank job, with that rank's shards, memory, compute and collective bytes; the other "
                   "ranks' data is a stand-in and links are modelled for the whole group. Needs one MPI process; "
                   "topology.world_size must be 0 or W, and ranks_per_node 0 puts all W on one node. 0 = off")
            .non_negative()
            .with_unit("ranks"));
  t.add(S::integer("topology.phantom_rank", 0,
                   "The rank a phantom run plays, 0..topology.phantom_world-1")
            .non_negative()
            .with_unit("rank"));

  // ---- collectives: backend, algorithms and how ranks wait (collectives/) ------------------------
  // nccl joins the allowed values with the CUDA backend, unconditionally (refused at run time when not
  // built), so that docs/options.md is the same for every build.
  t.add(S::enumeration("collectives.backend", {"mpi"}, "mpi",
                       "Communication backend: mpi = MPICH on host buffers"));
  t.add(S::boolean("collectives.mpi_native", false,
                   "false = hzpbench's ring and latency-optimal algorithms over nonblocking "
                   "point-to-point (bytes per link observed); true = MPICH's own collectives (bytes "
                   "per link then modelled)"));
  t.add(enum_option_spec("collectives.wait_policy", coll::kWaitPolicyNames, coll::MpiCommConfig{}.wait_policy,
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
  t.add(enum_option_spec("collectives.transport", coll::kTransportNames, coll::MpiCommConfig{}.transport,
                       "What carries hops between ranks on one machine (virtual nodes included; counters "
                       "and link emulation are the same either way): shm = shared-memory rings of "
                       "collectives.shm_slots slots per direction; mpi = MPI point-to-point (MPICH copies "
                       "twice); auto = shm when available and collectives.mpi_native is false, else mpi"));
  t.add(S::integer("collectives.shm_slot_bytes", 262144,
                   "Bytes per slot of the shared-memory rings (a multiple of 4096); messages stream "
                   "through them in chunks of this size")
            .in_range(4096, 67108864)
            .with_unit("bytes"));
  t.add(S::integer("collectives.single_copy_bytes", 0,
                   "Messages of at least this many bytes between ranks of one machine are read by the receiver "
                   "straight from the sender's buffer (process_vm_readv: one copy instead of the slots' two); "
                   "0 = always through the slots (default: it wins for all-gather up to 16 MiB and loses at "
                   "64 MiB, measured in docs/collectives.md). Where the kernel refuses cross-process reads, the "
                   "slots are used and the run says so once")
            .in_range(0, std::int64_t{1} << 40)
            .with_unit("bytes"));
  t.add(S::boolean("collectives.mapped_buffers", false,
                   "Messages between ranks of one machine whose bytes lie in shared buffers are read by the "
                   "receiver straight from the sender's pages, mapped: one copy instead of the slots' two. The "
                   "collectives benchmark allocates its buffers so; a CPU run's allocator then hands out shared "
                   "(memfd) memory, so the schedulers' buffers go mapped too (docs/collectives.md, Mapped buffers). "
                   "Where peers cannot map each other's buffers, the slots are used and the run says so once"));
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

  // ---- scheduler.*: declared once beside the schedulers' typed options (hzp/schedulers/scheduler_options.hpp)
  schedulers::register_scheduler_options(t);

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
