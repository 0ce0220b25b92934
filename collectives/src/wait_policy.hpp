// WaitPacer: what a thread does between two unsuccessful MPI_Test polls, per WaitPolicy
// (docs/environment.md: yield is best inline with ranks <= cores; a short sleep back-off is best when
// ranks oversubscribe the cores, because a yielding poller still steals the peers' time slices).
#pragma once

#include "hzp/collectives/mpi_communicator.hpp"

namespace hzp::coll::detail {

class WaitPacer {
 public:
  WaitPacer(WaitPolicy policy, double backoff_max_us) noexcept;
  /// Gives the core away once: a yield, or the next sleep of the back-off.
  void pause() noexcept;
  /// Back to the first (shortest) pause: for a wait that made progress.
  void reset() noexcept;

  /// How long mixed yields before backing off...
  static constexpr double kMixedYieldSeconds = 100e-6;
  /// ...or until one yield takes longer than this (the core was given to another thread).
  static constexpr double kSlowYieldSeconds = 200e-6;

 private:
  WaitPolicy policy_;
  double max_sleep_s_;
  double sleep_s_;
  double yield_until_s_ = -1;  // mixed: end of the yield phase (set on the first pause)
};

}  // namespace hzp::coll::detail

namespace hzp::coll::detail {
/// Waits for one MPI request (setup collectives: MPI_Comm_idup, the world-rank exchange of split)
/// under the config's policy and deadline; throws TimeoutError naming `what` and `group`.
void wait_mpi_request(MPI_Request& req, const MpiCommConfig& config, std::string_view what,
                      std::string_view group);
}  // namespace hzp::coll::detail
