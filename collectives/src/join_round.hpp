// The join round of an emulated call (docs/collectives.md "Link emulation"): header-only messages that tell every
// member the group's last join before anyone books its links, so a node interface is booked where the call can run.
#pragma once

#include <memory>

#include "algorithm.hpp"

namespace hzp::coll::detail {

/// `inner` (group rank `rank` of p) with one round in front: a header-only message to and from every other member,
/// direct, so no member waits on another to pass a join on. The live engine books the call's links once that round
/// is done (P2POperation's JoinBooking); the model never sees the round: it replays the algorithm alone, so the
/// round costs a message latency of real time inside the modelled call, never modelled time.
std::unique_ptr<Algorithm> with_join_round(std::unique_ptr<Algorithm> inner, int rank, int p);

}  // namespace hzp::coll::detail
