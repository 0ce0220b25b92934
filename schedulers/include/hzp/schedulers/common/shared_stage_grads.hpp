// The gradient of a unit two pipeline stages hold (Unit::shared: the tied embedding table, which the first stage
// runs and the last stage's head uses): each stage accumulates its own contribution over the step's micro-batches,
// and before the norm and the update the two sums are added by an all-reduce over the pair of ranks that hold it
// (Megatron's "embedding group": stage 0 and stage pp − 1 at the same data- and tensor-parallel position). Both
// copies then take the same update and stay identical. In deterministic mode the sums are int64 fixed point (the
// same exponent on both stages, fixed_point_grads.hpp), so the addition is exact.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// The units of a stage's layout that it shares with another stage and holds (Unit::shared, elements > 0): what
/// SharedStageGrads all-reduces, and what the plan declares.
std::vector<int> shared_units(const workloads::ParamLayout& stage);

class SharedStageGrads {
 public:
  /// The units of `layout` (this rank's stage) shared with another stage, and the group of the ranks holding them.
  /// Collective over `groups.world()` (every rank calls it, holding shared units or not).
  SharedStageGrads(const ProcessGroups& groups, const workloads::ParamLayout& layout);
  ~SharedStageGrads();

  /// The shared units this stage holds (empty on a middle stage, and without pipeline parallelism).
  const std::vector<int>& units() const noexcept { return units_; }
  /// Sums the final gradient of every shared unit this stage holds (grad_of(u): its block, f32 or int64) over the
  /// stages holding it, in place, ordered on `stream` (the engine's compute stream: on a GPU the blocks are device
  /// memory). Blocking; nothing without shared units.
  void all_reduce(const std::function<TensorView(int unit)>& grad_of, StreamRef stream) const;

 private:
  std::vector<int> units_;
  std::unique_ptr<coll::Communicator> group_;
};

}  // namespace hzp::schedulers
