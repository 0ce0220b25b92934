// `hzpbench simulate`'s model of one rank's step (docs/simulate.md): a discrete-event run of the step the
// engine describes (schedulers::describe_step: the driver's unit calls and every declared collective with its
// place and stream) with each unit's measured forward/backward time and each collective's duration from the link
// model an emulated run charges (coll::model_collective). Pure arithmetic, no MPI: any W runs on one machine.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "hzp/collectives/link_emulator.hpp"
#include "hzp/collectives/types.hpp"
#include "hzp/schedulers/plan.hpp"

namespace hzp::harness {

/// The calibration: wall seconds of each unit's forward and backward for one micro-batch of the whole model
/// (compute_rate.hpp), and the share of each unit's time that is attention (what ring attention overlaps its messages
/// with; empty: none). A rank computing a tensor- and context-parallel shard takes 1/(tp · cp) of a unit's time.
struct UnitTimes {
  std::vector<double> forward_s, backward_s;
  std::vector<double> attention_share;
  /// Of each unit's time, its routed experts' GEMMs (expert parallelism's all-to-alls wrap them); empty: none.
  std::vector<double> expert_share;
  /// Of each unit's time, seconds every rank takes after the unit's compute whatever its shard: the benchmark hook
  /// scheduler.debug_unit_sleep_ms (UnitSleep), which the run sleeps in full on every rank after the unit (its ring
  /// included) and before the engine's hook. Neither scaled by 1/(tp · cp) nor overlapped by a ring; empty: none.
  std::vector<double> after_s;
};

struct SimulatorLinks {
  coll::LinkEmulationConfig links;  ///< latency and bandwidth per level (as the emulated run's)
  int ranks_per_node = 0;           ///< 0: every rank on one node
  std::size_t small_message_bytes = 65536;  ///< below it the backend's latency-optimal algorithms (fewer rounds)
  /// Every rank has its own inter-node interface (a NIC per device, as the cluster profiles have): the copies of a
  /// group that a node's ranks run at once do not queue on one shared interface (false: the emulator's node link).
  bool nic_per_rank = false;
};

/// How the ranks of a node simulated together use its shared interface (SimulatorLinks::nic_per_rank false):
/// `copies`, each rank on its own clock, charged for the copies of its call that the node's other ranks run at the
/// same time (data-parallel symmetry: they start together and the last copy ends last); `shared`, where every rank of
/// the node is simulated together, one clock for the node that each copy reserves in the order of its call's time, as
/// the emulator's ranks do (the first copy ends first, so replicas whose messages queue there drift apart).
enum class NodeInterface { copies, shared };

/// Whether a node's ranks share one inter-node interface (the emulator's node link: ranks_per_node set and no NIC
/// per rank), which NodeInterface::shared then puts on one clock.
bool node_interface_shared(const SimulatorLinks& l);

/// The members of d's pipeline group (its first pipeline call's), nullptr without stages: the ranks whose nodes
/// the unpacked and the joined simulations put on one interface clock (NodeInterface::shared).
const std::vector<int>* pipeline_members(const schedulers::StepDescription& d);

/// One rank's simulated step, in the run's metric terms (docs/run.md): the step time closes into compute and
/// exposed communication (the compute thread's waits); comm_time_s sums every call's duration over all streams.
struct SimulatedStep {
  double step_s = 0, compute_s = 0, forward_s = 0, backward_s = 0, exposed_comm_s = 0, comm_time_s = 0;
  /// Of exposed_comm_s: the waits for a peer simulated together to join a collective (simulate_steps: a peer stage,
  /// at the tied table's sum or the norm over stages; simulate_joined besides: a slower data-parallel peer at any
  /// collective, and on a stream the spans its next call sat waiting for a late member while compute waited on it).
  double join_wait_s = 0;
  /// The compute thread's waits on the pipeline stream (a peer stage's message, its own sends' drain, the losses'
  /// sum where the stages meet): the bubble, not in exposed_comm_s.
  double pipeline_wait_s = 0;
  /// Per op and level: calls that moved bytes there, bytes sent by the rank, summed duration.
  std::array<std::array<std::int64_t, coll::kNumLinkLevels>, coll::kNumCollOps> count{}, bytes{};
  std::array<std::array<double, coll::kNumLinkLevels>, coll::kNumCollOps> time_s{};
};

/// Modelled duration of one call of `c` over `members` for `world_rank` (its ring or latency-optimal rounds, each
/// member sending the same bytes per round; the slowest link of a round sets it), with the node's interface shared by
/// the copies of the group its other ranks run at the same time (nic_busy_s: the node's, whoever the rank is).
/// `node_simulated`: the node's ranks are simulated together on one interface clock (NodeInterface::shared), so the
/// call is its copy alone, and only the group's lowest member on the node reserves the interface.
coll::CollectiveModel model_planned_call(const schedulers::PlannedCollective& c, const std::vector<int>& members,
                                         int world_rank, const SimulatorLinks& links, bool node_simulated = false);

/// Modelled duration of one point-to-point message of `c` (a send to the member at position `peer`): latency + bytes
/// / bandwidth of its level; between nodes the node's interface carries the copies its other ranks send at the same
/// time (their groups' same message), one after the other, as model_planned_call's copies (`node_simulated`: none).
coll::CollectiveModel model_message(const schedulers::PlannedCollective& c, const std::vector<int>& members,
                                    int world_rank, int peer, const SimulatorLinks& links, bool node_simulated = false);

/// Runs the step of `d` (one rank's description) against `t`. Rules: compute runs the unit calls in order; a
/// `compute` collective blocks it where declared (before the unit's compute, after it for gradients, or between
/// equal slices of it when inside); `ring` messages overlap the unit's attention blocks (docs/simulate.md); the
/// `params` stream issues gathers in order, at most d.prefetch unit calls ahead of the one compute consumes, and
/// compute waits for a unit's gathers before running it; the `gradients` stream takes each call when declared and
/// runs them in order. At the step end the gradients stream drains, then the step end's compute collectives run.
/// Streams share the rank's links: a call takes the earliest gap at or after its start that fits on every level it
/// uses (coll::LinkBook, the emulator's rule).
SimulatedStep simulate_step(const schedulers::StepDescription& d, const UnitTimes& t, const SimulatorLinks& links);

/// The steps of ranks that wait on each other (a pipeline group: its stages' descriptions), run together: a
/// stage's receive of micro-batch m waits for its peer's send of m, and a collective over several of these
/// ranks starts when the last of them joins. Each rank as simulate_step otherwise; one result per description.
/// With NodeInterface::shared, the ranks of each node all of whose ranks are here share its interface's clock, and
/// the simulations move in time order so that they reserve it as the emulated ranks do.
/// PreconditionError naming the stuck ranks when the descriptions wait on each other in a cycle.
std::vector<SimulatedStep> simulate_steps(const std::vector<const schedulers::StepDescription*>& ranks,
                                          const UnitTimes& t, const SimulatorLinks& links,
                                          NodeInterface nodes = NodeInterface::copies);

/// What ranks of one role share besides their description: per event of the description, which of its groups the
/// event is on (an index into RankGroups::members), and the described rank's position in each group (-1: none).
struct RoleGroups {
  std::vector<int> slot;
  std::vector<int> position;
};

/// A rank simulated with its role's description: its world rank and, per group of the role (RoleGroups::slot), its
/// own members. Ranks with one description share their collectives' modelled durations (the role's key holds
/// everything the link model reads of a group: its node pattern seen from the rank).
struct RankGroups {
  int rank = 0;
  const RoleGroups* role = nullptr;
  std::vector<schedulers::GroupMembers> members;
};

/// One rank of those simulated together: its description and, per local micro-batch (Action::micro_batch), the
/// factor its attention time takes (document packing, packing_imbalance.hpp); empty: 1 throughout. Ranks whose
/// factors differ compute differently: ranks of one role may share a description, but each is simulated with its own
/// factors.
struct SimulatedRank {
  const schedulers::StepDescription* description = nullptr;
  std::vector<double> attention_factor;
  /// Where `description` is another rank's of the same role (role_descriptions.hpp: equal up to the world ranks its
  /// groups hold), this rank's own groups; nullptr: the description is the rank's own.
  const RankGroups* groups = nullptr;
};

/// As simulate_steps, for ranks that do not compute alike (a join set: every rank some collective of theirs couples,
/// e.g. all data-parallel replicas of every stage): each unit's attention share (UnitTimes::attention_share) takes
/// the rank's factor for the micro-batch, and every collective over several of these ranks starts when its last
/// member issues it, on the params and gradients streams too (the stream's next call waits, not compute; the
/// refreshes queued at the step's start and the calls inside a unit, over ranks of the same rows, do not join).
/// With every factor 1 and symmetric peers it equals simulate_steps. Ranks given one description (SimulatedRank::groups)
/// share its calls' modelled durations, computed once. With NodeInterface::shared, the nodes all of whose ranks are
/// here are on one interface clock each, as in simulate_steps.
std::vector<SimulatedStep> simulate_joined(const std::vector<SimulatedRank>& ranks, const UnitTimes& t,
                                           const SimulatorLinks& links, NodeInterface nodes = NodeInterface::copies);

}  // namespace hzp::harness
