// Setting up the shared-memory transport: which ranks share a machine (host name and boot id, the
// grouping MPI_COMM_TYPE_SHARED gives; the mapping itself then proves it), the per-communicator
// segment of each machine (POSIX shm, created by the machine's lowest group rank, mapped by the
// others, unlinked as soon as all have mapped it), its layout of slot rings, and the collective
// ShmTransport::create that agrees on success across the group (else MPI, or an error under shm).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "mpi_check.hpp"
#include "shm_layout.hpp"
#include "shm_transport.hpp"
#include "wait_policy.hpp"

namespace hzp::coll::detail {
namespace {

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Ranks with equal keys run on one kernel (same host name, same boot): the ranks MPICH's
// MPI_COMM_TYPE_SHARED groups. (MPI_Comm_split_type itself is a blocking collective that costs
// ~0.3 s at 8 ranks on 2 cores, per world; this is one nonblocking allgather.)
std::uint64_t machine_key() {
  std::string boot_id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot_id);
  return mix(fnv1a(boot_id, fnv1a(host_name())));
}

std::string errno_text(const char* what, const std::string& name) {
  return std::string(what) + "(" + name + ") failed: " + std::strerror(errno);
}

// What a peer reads to learn whether this process's memory can be read across processes (create()).
constexpr std::uint64_t kProbeWord = 0x6878702d636d6121ull;
const volatile std::uint64_t probe_word = kProbeWord;

// Whether every machine peer's probe word reads back (process_vm_readv allowed between the job's processes); an
// error text for the first one that does not.
std::string probe_peers(const ShmSegment& seg, int me) {
  const SegmentHeader* head = seg.header();
  for (int i = 0; i < seg.layout().ranks; ++i) {
    if (i == me) continue;
    std::uint64_t got = 0;
    const std::string e = read_process_memory(head->probe[i].pid, head->probe[i].address,
                                              reinterpret_cast<std::byte*>(&got), sizeof got);
    if (!e.empty()) return e + " (reading machine peer " + std::to_string(i) + ", pid " +
                           std::to_string(head->probe[i].pid) + ")";
    if (got != kProbeWord) return "a machine peer's probe word read back wrong";
  }
  return {};
}

// Whether every machine peer's probe page maps and reads back (its shared buffers can be mapped here); an error text
// for the first one that does not.
std::string probe_peer_mappings(const ShmSegment& seg, int me) {
  const SegmentHeader* head = seg.header();
  PeerMappings maps;
  for (int i = 0; i < seg.layout().ranks; ++i) {
    if (i == me) continue;
    std::string error;
    const std::byte* p = maps.find(head->probe[i].shared, error);
    if (p == nullptr) return error + " (machine peer " + std::to_string(i) + ")";
    std::uint64_t got = 0;
    std::memcpy(&got, p, sizeof got);
    if (got != kMappedProbeWord) return "a machine peer's probe page read back wrong";
  }
  return {};
}

int all_min(int v, const CommState& st, std::string_view what) {
  int out = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  HZP_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_MIN, st.comm, &req));
  wait_mpi_request(req, st.config, what, st.name);
  return out;
}

// Collective over st.comm: whether every rank of the group can read its machine peers' memory one way (`probe`
// gives why this rank cannot, empty when it can); a refusal is said once per process on stderr (`said_format`,
// the reason put where it says %s).
bool agree_on_peer_reads(const CommState& st, const char* what, std::size_t ranks_here,
                         const std::function<std::string()>& probe, const char* said_format) {
  std::string refused;
  if (ranks_here > static_cast<std::size_t>(SegmentHeader::kMaxProbes))
    refused = std::to_string(ranks_here) + " ranks on one machine, more than the segment header's " +
              std::to_string(SegmentHeader::kMaxProbes) + " probe entries";
  else
    refused = probe();
  const bool ok = all_min(refused.empty() ? 1 : 0, st, std::string("shared-memory setup (") + what + ")") == 1;
  if (!ok) {
    static std::mutex said_mu;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(said_mu);
    if (said.insert(what).second) {
      std::string line = std::string("hzpbench: ") + said_format;
      line.replace(line.find("%s"), 2, refused.empty() ? "another rank could not read its peers" : refused);
      std::fputs(line.c_str(), stderr);
    }
  }
  return ok;
}

}  // namespace

// ---- the segment ---------------------------------------------------------------------------------------

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

std::unique_ptr<ShmSegment> ShmSegment::map(const std::string& name, const ShmLayout& layout, std::uint64_t id,
                                            bool create, std::string& error) {
  const std::size_t bytes = layout.total_bytes();
  const int fd = shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) {
    error = errno_text("shm_open", name);
    return nullptr;
  }
  // A new object reads as zeros: every slot's sequence number starts at 0 ("free, never used").
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = errno_text("ftruncate", name);
    close(fd);
    shm_unlink(name.c_str());
    return nullptr;
  }
  struct stat sb {};
  if (!create && (fstat(fd, &sb) != 0 || static_cast<std::size_t>(sb.st_size) != bytes)) {
    error = "shared-memory segment " + name + " has " + std::to_string(sb.st_size) + " bytes, expected " +
            std::to_string(bytes) + " (not the segment this group's leader created)";
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the object alive
  if (p == MAP_FAILED) {
    error = errno_text("mmap", name);
    if (create) shm_unlink(name.c_str());
    return nullptr;
  }
  auto seg = std::unique_ptr<ShmSegment>(new ShmSegment());
  seg->base_ = static_cast<std::byte*>(p);
  seg->bytes_ = bytes;
  seg->layout_ = layout;
  seg->name_ = name;
  auto* head = reinterpret_cast<SegmentHeader*>(p);
  if (create) {
    head->id = id;
    head->ranks = static_cast<std::uint32_t>(layout.ranks);
    head->slots = static_cast<std::uint32_t>(layout.slots);
    head->slot_bytes = layout.slot_bytes;
    // Published last: an opener that sees the magic sees the fields above (the MPI synchronisation
    // between creating and opening orders them anyway; this keeps the check self-contained).
    std::atomic_ref<std::uint64_t>(head->magic).store(SegmentHeader::kMagic, std::memory_order_release);
  } else {
    const bool ok = std::atomic_ref<std::uint64_t>(head->magic).load(std::memory_order_acquire) ==
                        SegmentHeader::kMagic &&
                    head->id == id && head->ranks == static_cast<std::uint32_t>(layout.ranks) &&
                    head->slots == static_cast<std::uint32_t>(layout.slots) && head->slot_bytes == layout.slot_bytes;
    if (!ok) {
      error = "shared-memory segment " + name + " does not carry this communicator's id and layout";
      return nullptr;
    }
  }
  return seg;
}

void ShmSegment::unlink() noexcept { shm_unlink(name_.c_str()); }

SlotHeader* ShmSegment::ring(int from, int to) const noexcept {
  const std::size_t index = static_cast<std::size_t>(from) * static_cast<std::size_t>(layout_.ranks) +
                            static_cast<std::size_t>(to);
  return reinterpret_cast<SlotHeader*>(base_ + ShmLayout::kHeaderBytes + index * layout_.ring_bytes());
}

// ---- machines and names ----------------------------------------------------------------------------------

bool wants_shm(const MpiCommConfig& c) noexcept {
  return c.transport == Transport::shm || (c.transport == Transport::automatic && !c.mpi_native);
}

void discover_machines(WorldContext& ctx, MPI_Comm comm, const MpiCommConfig& config, std::string_view name) {
  if (!wants_shm(config)) return;
  int rank = 0, size = 0;
  HZP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HZP_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Each rank proposes a job id; rank 0's is taken. pid and time: unique among the jobs of a machine,
  // and two worlds of one process differ by their creation time.
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const std::uint64_t uid = mix((static_cast<std::uint64_t>(getpid()) << 32) ^
                                (static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
                                 static_cast<std::uint64_t>(ts.tv_nsec)));
  const std::array<std::uint64_t, 2> mine{machine_key(), uid};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
  MPI_Request req = MPI_REQUEST_NULL;
  HZP_MPI_CHECK(MPI_Iallgather(mine.data(), 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm, &req));
  wait_mpi_request(req, config, "machine discovery (shared-memory transport)", name);
  ctx.machine_of_world_rank.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) ctx.machine_of_world_rank[static_cast<std::size_t>(r)] = all[2 * static_cast<std::size_t>(r)];
  ctx.job_uid = all[1];
}

std::uint64_t child_channel_id(std::uint64_t parent_id, std::uint64_t ordinal, int child_rank0_world_rank) noexcept {
  return mix(parent_id ^ mix(ordinal) ^ mix(0x5bd1e995ull + static_cast<std::uint64_t>(child_rank0_world_rank)));
}

// ---- the collective setup --------------------------------------------------------------------------------

std::unique_ptr<ShmTransport> ShmTransport::create(const CommState& st) {
  const WorldContext& w = *st.world;
  if (!wants_shm(st.config) || w.machine_of_world_rank.empty()) return nullptr;
  const auto machine = [&](int q) {
    return w.machine_of_world_rank[static_cast<std::size_t>(st.world_ranks[static_cast<std::size_t>(q)])];
  };
  // My machine's group ranks, ascending; whether any machine holds two (the same answer everywhere).
  std::vector<int> local;
  bool any_pair = false;
  for (int q = 0; q < st.size; ++q) {
    if (machine(q) == machine(st.rank)) local.push_back(q);
    for (int o = 0; o < q && !any_pair; ++o) any_pair = machine(o) == machine(q);
  }
  if (!any_pair) return nullptr;

  ShmLayout layout;
  layout.ranks = static_cast<int>(local.size());
  layout.slots = st.config.shm_slots;
  layout.slot_bytes = st.config.shm_slot_bytes;
  const bool leader = local.size() >= 2 && local.front() == st.rank;
  char name[96];
  std::snprintf(name, sizeof name, "/hzp-ch-%016llx-%016llx-%d", static_cast<unsigned long long>(w.job_uid),
                static_cast<unsigned long long>(st.channel_id), st.world_ranks[static_cast<std::size_t>(local.front())]);

  std::string error;
  std::unique_ptr<ShmSegment> seg;
  if (leader) seg = ShmSegment::map(name, layout, st.channel_id, /*create=*/true, error);
  // Created everywhere (or not) before anyone opens.
  const bool created = all_min(error.empty() ? 1 : 0, st, "shared-memory setup (create)") == 1;
  if (created && local.size() >= 2 && !leader) seg = ShmSegment::map(name, layout, st.channel_id, false, error);
  // Single copy: each rank says where its probe word is (ordered before the peers' probes by the next all_min).
  const int me = static_cast<int>(std::find(local.begin(), local.end(), st.rank) - local.begin());
  const bool single_copy = st.config.single_copy_bytes > 0;  // the same on every rank: the all_min below is collective
  const bool want_mapped = st.config.mapped_buffers;         // likewise
  const bool probe_room = local.size() <= static_cast<std::size_t>(SegmentHeader::kMaxProbes);
  if (seg && (single_copy || want_mapped) && probe_room)
    seg->header()->probe[me] = {static_cast<std::int64_t>(getpid()),
                                reinterpret_cast<std::uint64_t>(const_cast<std::uint64_t*>(&probe_word)),
                                want_mapped ? mapped_probe() : SharedRange{}};
  const bool mapped = all_min(error.empty() ? 1 : 0, st, "shared-memory setup (map)") == 1;
  // Mapped by every rank that needs it: the name has served its purpose. Unlinking now leaves nothing
  // behind however the job ends later.
  if (leader && seg) seg->unlink();
  if (!created || !mapped) {
    seg.reset();
    if (st.config.transport == Transport::shm)
      HZP_THROW(IoError, "collectives.transport = shm: communicator '", st.name,
                "' cannot share memory between its ranks on one machine: ",
                error.empty() ? std::string("another rank failed to create or map its machine's segment") : error,
                " (transport = auto falls back to MPI)");
    return nullptr;
  }
  // Every rank decides alike whether each way of reading a sender's memory is on (a sender must know that every
  // receiver can read it that way).
  const bool direct = single_copy && agree_on_peer_reads(
      st, "single copy", local.size(), [&] { return seg && local.size() >= 2 ? probe_peers(*seg, me) : std::string(); },
      "single-copy shared memory is off for this job: %s. Messages go through the shared-memory slots (two "
      "copies). Fix: allow process_vm_readv between the job's processes (kernel.yama.ptrace_scope = 0, or "
      "CAP_SYS_PTRACE), or set collectives.single_copy_bytes = 0 to silence this\n");
  const bool mapped_ok = want_mapped && agree_on_peer_reads(
      st, "mapped buffers", local.size(),
      [&] { return seg && local.size() >= 2 ? probe_peer_mappings(*seg, me) : std::string(); },
      "mapped shared buffers are off for this job: %s. Their messages go through the shared-memory slots (two "
      "copies). Fix: let the job's processes open each other's /proc/<pid>/fd (same user, no hidepid), or set "
      "collectives.mapped_buffers = false to silence this\n");
  if (local.size() < 2) return nullptr;  // alone on this machine: every hop goes through MPI

  std::vector<int> local_of(static_cast<std::size_t>(st.size), -1);
  for (std::size_t i = 0; i < local.size(); ++i) local_of[static_cast<std::size_t>(local[i])] = static_cast<int>(i);
  return std::unique_ptr<ShmTransport>(
      new ShmTransport(std::move(seg), st, local_of, direct ? st.config.single_copy_bytes : 0, mapped_ok));
}

}  // namespace hzp::coll::detail
