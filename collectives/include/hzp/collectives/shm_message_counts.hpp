// How this process's messages crossed the shared-memory transport (docs/collectives.md "Mapped buffers"): through
// the slots, by descriptor read with process_vm_readv (single copy), or by descriptor read from the receiver's
// mapping of a SharedBuffer; and how many descriptor sends ended before their receiver had read them (kept sends).
// Process-wide, over every communicator, since the start of the process: what a run reports to show which path
// its collectives took.
#pragma once

#include <cstdint>

namespace hzp::coll {

struct ShmMessageCounts {
  std::uint64_t slots = 0;        // messages sent chunk by chunk through the slots
  std::uint64_t single_copy = 0;  // by descriptor, read with process_vm_readv
  std::uint64_t mapped = 0;       // by descriptor, read from a mapped SharedBuffer
  std::uint64_t ended_early = 0;  // descriptor sends that ended once the descriptor was out (Poster::send_kept)
};

/// The counts so far (each read atomically; together, a snapshot only when no message is in flight).
ShmMessageCounts shm_message_counts() noexcept;

}  // namespace hzp::coll
