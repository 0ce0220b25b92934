// The plan as the step runs it: a parameter engine declares, next to the code that issues them, which
// collectives it runs for each unit of each action and at the end of the step, and how many bytes of model
// state it keeps; the driver declares its own (the loss, deterministic mode's tally). plan_scheduler walks the
// schedule the driver would run over those declarations, so a new schedule (a pipeline's) or a new engine
// changes the plan without a second description of either. The bytes per link level of each call are
// worked out from the group's members by the plan (schedulers/plan/scheduler_plan.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hzp/collectives/topology.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/pipeline_schedule.hpp"
#include "hzp/schedulers/step/schedule.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// A group as the plan sees it: the communicator's name and its members' world ranks in position order (shared
/// by every call declared on it).
struct PlanGroup {
  std::string name;
  GroupMembers members;
};

/// Where declarations go. Elements as the counters record them: all_gather the shard each rank sends,
/// reduce_scatter the full input, all_reduce the buffer. `times` identical calls; `when` labels the row.
class CollectiveLedger {
 public:
  virtual ~CollectiveLedger() = default;
  virtual void all_gather(const PlanGroup& g, std::int64_t shard, DType t, std::int64_t times, std::string_view when) = 0;
  virtual void reduce_scatter(const PlanGroup& g, std::int64_t full, DType t, std::int64_t times,
                              std::string_view when) = 0;
  virtual void all_reduce(const PlanGroup& g, std::int64_t count, DType t, std::int64_t times, std::string_view when) = 0;
  /// All-to-all (op all_to_all) or all-to-all-v (all_to_allv) of `count` elements sent per call, the rank's own share
  /// included, spread evenly over the group's members (for all_to_allv: the balanced expectation, which `when` says).
  virtual void all_to_all(const PlanGroup& g, coll::CollOp op, std::int64_t count, DType t, std::int64_t times,
                          std::string_view when) = 0;
  /// Point-to-point: `count` elements to (send) or from (recv) the member at position `peer` of g.
  virtual void send(const PlanGroup& g, int peer, std::int64_t count, DType t, std::int64_t times,
                    std::string_view when) = 0;
  virtual void recv(const PlanGroup& g, int peer, std::int64_t count, DType t, std::int64_t times,
                    std::string_view when) = 0;
  /// The stream the following declarations run on and whether they precede or follow the unit's compute (until
  /// the next call; each unit() and step_end() starts on `compute`, before). Only the simulator reads it; the
  /// plan's totals do not depend on it.
  virtual void stream(CommStream, CommPlace = CommPlace::before_unit) {}
  /// For the following declarations on the `ring` stream: their calls are spread over `rounds` steps of a ring that
  /// computes `blocks` attention blocks (StepEvent). Only the simulator reads it.
  virtual void ring(int /*rounds*/, int /*blocks*/) {}
};

/// An engine's declaration for one configuration and rank (made by the engine's own `plan_*` function from
/// PlanInputs, without MPI).
class EnginePlan {
 public:
  virtual ~EnginePlan() = default;
  /// The collectives the engine issues around unit `u` of action `a` (forward: for its parameters; backward:
  /// for its parameters and the gradients that become final). micro_batches: the rank's per step.
  /// Called in the order the driver calls the model, so an engine may keep state across calls.
  virtual void unit(const Action& a, int u, int micro_batches, CollectiveLedger& out) = 0;
  /// The collectives of finish_step (the step-end exchange, the norm, the parameter refresh).
  virtual void step_end(CollectiveLedger& out) const = 0;

  /// Model-state bytes per rank: param, grad, master, m, v (the allocation tags' requested bytes).
  std::array<std::uint64_t, 5> state_bytes{};
  /// The rank's micro-batches per step.
  std::int64_t micro_batches_per_rank = 0;
  /// The group the step driver reduces the loss over (and, in deterministic mode, the fixed-point tally);
  /// empty for a scheduler that does not run on the driver (none).
  PlanGroup driver_group;
  /// The group deterministic mode's verdict on an attempt runs over (ParameterEngine::verdict_group); empty:
  /// driver_group.
  PlanGroup verdict_group;
  /// The actions the driver runs on this rank (a pipeline stage's schedule); empty: the sequential schedule over
  /// micro_batches_per_rank.
  std::vector<Action> actions;
  /// Chunks per pipeline stage (interleaving's v; 1 otherwise), for activations_in_flight.
  int chunks_per_stage = 1;
  /// The most bytes of gathered full parameter blocks the rank holds at once over the schedule (asynchzp, which
  /// sets it while unit() walks the actions: with pp_reuse a stage's blocks stay gathered); 0 when not estimated.
  std::uint64_t gathered_peak_bytes = 0;
  /// The degrees the model runs at on this rank (its tensor- and context-parallel shares), for the activation
  /// estimate: 1 for engines that hold whole sequences of the whole model.
  int model_tp = 1, model_cp = 1;
  /// Parameter gathers the engine's params stream issues beyond the one in use (asynchzp async:
  /// scheduler.prefetch); 0 when it declares nothing on that stream.
  int prefetch = 0;
};

/// The plan of `scheduler` from an engine's declaration: the schedule the driver runs (e.actions, or the sequential
/// one) walked over e.unit(), then e.step_end(), then the driver's own collectives over e.driver_group.
/// With `events`, every declared call is also appended there with its place and stream (describe_step).
SchedulerPlan plan_from_engine(std::string scheduler, const PlanInputs& in, EnginePlan& e,
                               StepDescription* events = nullptr);

/// The topology the plan lays groups on: W ranks, topology.ranks_per_node of them per node (all on one when 0).
coll::Topology plan_topology(const PlanInputs& in);

/// ConfigError naming scheduler, W, the group size and the batch when the micro-batches per step are not a
/// multiple of the data-parallel degree `dp` (0: W) or `group` (> 0) does not divide W: the data-parallel
/// schedulers' own check, without MPI.
void check_plan_batches(std::string_view scheduler, const PlanInputs& in, int group, int dp = 0);

/// Every rank of the world, in rank order, as group `name` (a duplicate of the world).
PlanGroup world_plan_group(std::string name, int world_size);

/// The gradient norm's sum of squares all-reduced over `g` at the step end (ShardedOptimizer / FixedPointGrads
/// global_sum_squares): one fp64, or in deterministic mode the exact 128-bit sum as four int64 limbs; nothing for
/// a group of one.
void declare_norm(CollectiveLedger& out, const PlanGroup& g, bool deterministic);

/// Deterministic mode sums gradients as int64 fixed point (8 bytes on the wire); fp32 otherwise.
DType grad_wire_dtype(const workloads::TrainConfig& train);

}  // namespace hzp::schedulers
