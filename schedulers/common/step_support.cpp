// Validation, loss reduction and the process groups shared by the data-parallel schedulers
// (common/step_support.hpp), plus the state digest of data_parallel.hpp.
#include "hzp/schedulers/common/step_support.hpp"

#include <sstream>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/schedulers/data_parallel.hpp"

namespace hzp::schedulers {

void validate_data_parallel(std::string_view scheduler, const SchedulerArgs& args, int group_size, int dp) {
  HZP_CHECK(args.model != nullptr && args.allocator != nullptr && args.world != nullptr, "scheduler ", scheduler,
            ": a model, an allocator and a world communicator are required");
  args.train.validate();
  if (args.train.precision != args.model->precision())
    HZP_THROW(ConfigError, "train.precision = ", workloads::to_string(args.train.precision),
              " but the model was built for ", workloads::to_string(args.model->precision()));
  if (args.train.precision == workloads::Precision::fp64)
    HZP_THROW(ConfigError, "scheduler.name = ", scheduler, " does not run train.precision = fp64 (the reference's "
              "test-only precision); use fp32 or bf16-mixed");
  const int w = args.world->size();
  const std::int64_t mb = args.train.micro_batches();
  std::ostringstream bad;
  if (group_size > 0 && w % group_size != 0)
    bad << "\n  scheduler.group_size = " << group_size << " does not divide the world size " << w;
  if (dp == 0) dp = w;
  if (mb % dp != 0)
    bad << "\n  train.global_batch = " << args.train.global_batch << " / train.micro_batch_size = "
        << args.train.micro_batch_size << " gives " << mb << " micro-batches per step, not a multiple of the "
        << "data-parallel size dp = " << (dp == w ? "W = " : "") << dp
        << " (every data-parallel rank must process the same number)";
  if (args.options.bucket_mb <= 0)
    bad << "\n  scheduler.bucket_mb = " << args.options.bucket_mb << " must be > 0";
  if (!bad.str().empty()) HZP_THROW(ConfigError, "scheduler ", scheduler, " at world size ", w, ":", bad.str());
}

ParallelDims data_parallel_dims(int world_size, int shard) {
  HZP_CHECK(shard >= 1 && world_size % shard == 0, "data-parallel dims: shard group ", shard,
            " does not divide W = ", world_size);
  ParallelDims d;
  d.dp_shard = shard;
  d.dp_replicate = world_size / shard;
  return d;
}

const ProcessGroups& scheduler_groups(std::string_view name, const SchedulerArgs& args,
                                      std::unique_ptr<ProcessGroups>& owned) {
  const int w = args.world->size();
  const ParallelDims dims = scheduler_parallel_dims(name, args.options, w);
  if (args.groups != nullptr) {
    const ParallelDims& got = args.groups->dims();
    if (!(got == dims) || &args.groups->world() != args.world)
      HZP_THROW(ConfigError, "scheduler ", name, " runs with the degrees ", dims.describe(), " over '",
                args.world->name(), "', but was handed process groups of ", got.describe(), " over '",
                args.groups->world().name(), "'. Fix: build the groups from scheduler_parallel_dims");
    return *args.groups;
  }
  const coll::Topology one_node = coll::Topology::virtual_nodes(w, w, args.world->rank());
  owned = std::make_unique<ProcessGroups>(*args.world, dims, args.topology ? *args.topology : one_node);
  return *owned;
}

void check_tensor_parallel_model(std::string_view scheduler, const ProcessGroups& groups,
                                 const workloads::Workload& model) {
  const int tp = groups.dims().tp;
  const int tp_rank = groups.tensor() ? groups.tensor()->rank() : 0;
  int pieces = 0;
  for (const workloads::Unit& u : model.layout().units())
    for (const workloads::ParamTensor& t : u.tensors) {
      if (!t.shard.sharded() || t.shard.group == "ep") continue;  // expert pieces: ExpertDataParallel checks them
      if (t.shard.count != tp || t.shard.index != tp_rank || t.shard.group != "tp")
        HZP_THROW(ConfigError, "scheduler ", scheduler, " runs tp = ", tp, " but the model's ", t.name, " is piece ",
                  t.shard.index, " of ", t.shard.count, " over group '", t.shard.group, "' on tensor-parallel rank ",
                  tp_rank, ". Fix: build the model with the run's tensor-parallel group");
      ++pieces;
    }
  if (tp > 1 && pieces == 0)
    HZP_THROW(ConfigError, "scheduler ", scheduler, " runs tp = ", tp, " but the model (", model.describe(),
              ") holds no tensor-parallel pieces: it was built whole. Fix: build it with the run's tensor-parallel "
              "group (ProcessGroups::tensor())");
}

void check_context_parallel_model(std::string_view scheduler, const ProcessGroups& groups,
                                  const workloads::Workload& model) {
  const int cp = groups.dims().cp;
  const workloads::ContextShard* shard = model.context_shard();
  const int got = shard ? shard->cp() : 1, got_rank = shard ? shard->rank() : 0;
  const int want_rank = groups.context() ? groups.context()->rank() : 0;
  if (got != cp || got_rank != want_rank)
    HZP_THROW(ConfigError, "scheduler ", scheduler, " runs cp = ", cp, " (context-parallel rank ", want_rank,
              ") but the model (", model.describe(), ") runs ", shard ? "rank " : "whole sequences",
              shard ? std::to_string(got_rank) + " of cp = " + std::to_string(got) : std::string(),
              ". Fix: build the model with the run's context-parallel group (ProcessGroups::context())");
}

std::int64_t gradient_summands(const workloads::TrainConfig& train, const ParallelDims& dims) {
  return train.micro_batches() * dims.cp;
}

bool verdict_over_world(const ParallelDims& dims) { return dims.tp > 1 || dims.pp > 1 || dims.cp > 1; }

TensorParallelExtras::TensorParallelExtras(const ProcessGroups& groups, bool deterministic) : tp_(groups.tensor()) {
  if (tp_ != nullptr) debug_ = tp_->duplicate("debug", /*share_counters=*/false);
  if (deterministic && verdict_over_world(groups.dims())) verdict_ = groups.world().duplicate("verdict");
}

namespace {

StepStats step_stats(std::int64_t step, double loss, const OptimizerStepResult& r, std::int64_t tokens,
                     double compute_seconds, double optimizer_seconds, double seconds) {
  StepStats st;
  st.step = step;
  st.loss = loss;
  st.grad_norm = r.grad_norm;
  st.clip_coefficient = r.clip_coefficient;
  st.lr = r.lr;
  st.tokens = tokens;
  st.compute_seconds = compute_seconds;
  st.optimizer_seconds = optimizer_seconds;
  st.seconds = seconds;
  return st;
}

}  // namespace

StepStats data_parallel_step_stats(std::int64_t step, coll::Communicator& scalars, double local_loss,
                                   const OptimizerStepResult& r, std::int64_t tokens, double compute_seconds,
                                   double optimizer_seconds, double seconds) {
  return step_stats(step, all_reduce_sum(scalars, local_loss), r, tokens, compute_seconds, optimizer_seconds, seconds);
}

StepStats data_parallel_step_stats(std::int64_t step, coll::Communicator& scalars, const workloads::BatchPlan& plan,
                                   std::span<const double> losses, const FixedPointGrads* fixed,
                                   const OptimizerStepResult& r, std::int64_t tokens, double compute_seconds,
                                   double optimizer_seconds, double seconds) {
  if (fixed == nullptr) {
    double local = 0;
    for (double l : losses) local += l;
    return data_parallel_step_stats(step, scalars, local, r, tokens, compute_seconds, optimizer_seconds, seconds);
  }
  StepStats st = step_stats(step, ordered_global_loss(scalars, plan, losses), r, tokens, compute_seconds,
                            optimizer_seconds, seconds);
  st.retries = fixed->retries();
  return st;
}

double ordered_global_loss(coll::Communicator& scalars, const workloads::BatchPlan& plan, std::span<const double> mine) {
  const std::int64_t m = plan.micro_batches_per_rank();
  const int w = scalars.size();
  HZP_CHECK(static_cast<std::int64_t>(mine.size()) == m && plan.dp() == w, "ordered_global_loss: ", mine.size(),
            " local losses for ", m, " micro-batches per rank, dp = ", plan.dp(), " over a group of ", w);
  std::vector<double> all(static_cast<std::size_t>(m * w));
  scalars.all_gather(ConstTensorView(mine.data(), Shape{m}, DType::f64), TensorView(all.data(), Shape{m * w}, DType::f64),
                     StreamRef::host());
  // Position of micro-batch j in the gathered vector: its rank's block, its index in that rank's list.
  std::vector<double> by_j(all.size());
  for (int r = 0; r < w; ++r) {
    const std::vector<std::int64_t> js = plan.micro_batches_of(r);
    for (std::size_t i = 0; i < js.size(); ++i) by_j[static_cast<std::size_t>(js[i])] = all[r * m + i];
  }
  double loss = 0;
  for (double l : by_j) loss += l;
  return loss;
}

bool conclude_fixed_point_attempt(FixedPointGrads& fixed, coll::Communicator& group) {
  std::vector<double> t = fixed.tally();
  group.all_reduce(TensorView(t.data(), Shape{static_cast<std::int64_t>(t.size())}, DType::f64), coll::ReduceOp::max,
                   StreamRef::host());
  return fixed.conclude(t);
}

double all_reduce_sum(coll::Communicator& comm, double local) {
  double v = local;
  comm.all_reduce(TensorView(&v, Shape{1}, DType::f64), coll::ReduceOp::sum, StreamRef::host());
  return v;
}

std::uint64_t state_digest(const void* data, std::size_t bytes) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace hzp::schedulers
