// The synchronous data-parallel schedulers (issue 7): ddp, zero1, zero2, zero3 and hsdp, built from the
// shared components in hzp/schedulers/common/. Each issues its collectives inline on the calling thread.
// What tests and tools see beyond the Scheduler interface: the state that must stay bitwise equal across
// replicas (as digests), and the reduced gradient of the last step, gathered.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

/// Digests of the state a rank holds that other ranks hold identically: every rank with the same
/// `replica_key` must report identical digests (same names, same values). zero3 holds no replicated
/// state (each rank's key is unique and its list empty); that is a statement, not a skipped check.
struct ReplicaDigests {
  int replica_key = 0;
  std::vector<std::pair<std::string, std::uint64_t>> digests;  ///< (component, FNV-1a 64 of its bytes)
};

class DataParallelScheduler : public Scheduler {
 public:
  virtual ReplicaDigests replicated_state() const = 0;
  /// Collective over the scheduler's ranks: the gradient the last step's optimizer used (reduced over
  /// every micro-batch of the global batch, before clipping), as a flat fp32 [N] on every rank. Uses a
  /// private communicator whose traffic is not counted. For parity tests and debugging.
  virtual std::vector<float> gather_gradient() = 0;
  /// Collective, like gather_gradient: the fp32 master parameters (in fp32 training the parameters
  /// themselves), flat [N] on every rank, for parity checks (deterministic mode compares them bitwise).
  /// The default throws UnsupportedError naming the scheduler.
  virtual std::vector<float> gather_master_params() {
    HZP_THROW(UnsupportedError, "scheduler ", name(), " cannot gather its master parameters yet");
  }
  /// Collective, like gather_gradient: the working parameters (what forward reads; bf16 values widened
  /// exactly to fp32), flat [N] on every rank.
  virtual std::vector<float> gather_working_params() = 0;
  /// Collective, like gather_gradient: AdamW's first moment m (`second` false) or second moment v, flat
  /// fp32 [N] on every rank.
  virtual std::vector<float> gather_moment(bool second) = 0;
};

/// FNV-1a 64 over the bytes of a buffer.
std::uint64_t state_digest(const void* data, std::size_t bytes) noexcept;

/// Registry entries (scheduler_registry.cpp). Each throws ConfigError naming every value when the world
/// size, group size or micro-batch count does not fit.
std::unique_ptr<Scheduler> make_ddp_scheduler(const SchedulerArgs& args);
std::unique_ptr<Scheduler> make_zero1_scheduler(const SchedulerArgs& args);
std::unique_ptr<Scheduler> make_zero2_scheduler(const SchedulerArgs& args);
std::unique_ptr<Scheduler> make_zero3_scheduler(const SchedulerArgs& args);
std::unique_ptr<Scheduler> make_hsdp_scheduler(const SchedulerArgs& args);
/// nd's two engines (nd.hpp): ddp's replicas, and zero1's sharded optimizer (Megatron's distributed optimizer),
/// each over nd's data-parallel group of a tensor-parallel model.
std::unique_ptr<Scheduler> make_replicated_nd_scheduler(const SchedulerArgs& args);
std::unique_ptr<Scheduler> make_distributed_optimizer_nd_scheduler(const SchedulerArgs& args);
/// nd's distributed optimizer for a model with expert pieces (scheduler.ep > 1) or tensor-parallel gradient shares (an
/// MoE model under tp > 1): dense elements sharded over data × context, expert pieces over their expert-data group.
std::unique_ptr<Scheduler> make_expert_optimizer_nd_scheduler(const SchedulerArgs& args);
/// What the expert optimizer cannot run, refused by the engine and its plan alike (ConfigError naming the keys):
/// deterministic mode.
void check_expert_optimizer(const workloads::TrainConfig& train, const ParallelDims& dims);

}  // namespace hzp::schedulers
