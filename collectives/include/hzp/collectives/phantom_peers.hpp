// Whether a communicator's peers are modelled rather than present (a phantom world, docs/phantom.md). The
// communicator models everything its own calls need; a caller asks this where it must model more of what the
// absent peers do (a pipeline stage: when the stage before it would have sent the message it receives).
#pragma once

#include "hzp/collectives/communicator.hpp"

namespace hzp::coll {

/// True for a communicator of a phantom world (make_phantom_world and its children), false for any other.
bool phantom_peers(const Communicator& c) noexcept;

}  // namespace hzp::coll
