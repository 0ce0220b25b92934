// The join round of an emulated call (docs/collectives.md "Link emulation"): header-only messages that tell every
// member the group's last join before anyone books its links, so a node interface is booked where the call can run.
#pragma once

#include <memory>
#include <vector>

#include "algorithm.hpp"

namespace hzp::coll::detail {

/// `inner` with one round in front: a header-only message to each of `tell` and from each of `hear`. The live engine
/// books the call's links once that round is done (P2POperation's JoinBooking); the model never sees the round: it
/// replays the algorithm alone, so the round costs a message latency of real time inside the modelled call, never
/// modelled time.
std::unique_ptr<Algorithm> with_join_round(std::unique_ptr<Algorithm> inner, std::vector<int> tell,
                                           std::vector<int> hear);

}  // namespace hzp::coll::detail
