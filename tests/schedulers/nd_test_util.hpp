// What the nd tests (and asynchzp's with context parallelism) share: one run of nd or asynchzp over a world (the model
// built over the mesh's tensor- and context-parallel groups and, with pipeline stages, holding this rank's stage), a
// visitor capturing a state dump's gradients, and ring attention's traffic per step from the algorithm.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data_parallel_test_util.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/nd.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/schedulers/step/step_driver.hpp"
#include "hzp/workloads/model_factory.hpp"

namespace hzp::test {

/// What an NdRun is made of: the scheduler's options, an edit of tiny's shape, and the training settings tests vary.
struct NdRunSpec {
  schedulers::SchedulerOptions options;
  std::function<void(workloads::LlamaConfig&)> shape;
  bool recompute = false;
  bool deterministic = false;
  std::int64_t global_batch = 0;  ///< 0: tiny's
  workloads::Precision precision = workloads::Precision::fp32;
  std::string scheduler = "nd";  ///< or "asynchzp" (its cp)
};

/// `scheduler`'s plan for a model of `model`'s shape trained with `train` under `options`, for `rank` of `world_size`.
inline schedulers::SchedulerPlan plan_for(const std::string& scheduler, const workloads::LlamaConfig& model,
                                          const workloads::TrainConfig& train,
                                          const schedulers::SchedulerOptions& options, int world_size, int rank) {
  const std::unique_ptr<workloads::ModelSpec> spec = workloads::llama_spec(model);
  const workloads::ParamLayout whole = spec->layout();
  schedulers::PlanInputs in;
  in.layout = &whole;
  in.model = spec.get();
  in.train = train;
  in.options = options;
  in.world_size = world_size;
  in.rank = rank;
  return schedulers::plan_scheduler(scheduler, in);
}

/// One run of the spec's scheduler over `world` (every rank of it), laid out on (a copy of) `topology`.
struct NdRun {
  coll::Topology topology;
  TinySetup setup;
  std::unique_ptr<schedulers::ProcessGroups> groups;
  std::unique_ptr<schedulers::Scheduler> scheduler;
  std::string scheduler_name;

  NdRun(coll::Communicator& world, const coll::Topology& topo, const NdRunSpec& spec)
      : topology(topo), setup(spec.precision, spec.shape), scheduler_name(spec.scheduler) {
    setup.train.recompute = spec.recompute;
    setup.train.deterministic = spec.deterministic;
    if (spec.global_batch > 0) setup.train.global_batch = spec.global_batch;
    const schedulers::SchedulerOptions& o = spec.options;
    groups = std::make_unique<schedulers::ProcessGroups>(
        world, schedulers::scheduler_parallel_dims(spec.scheduler, o, world.size()), topology);
    const workloads::StageCut cut =
        o.pp > 1 ? schedulers::pipeline_layout_from(o, setup.model->layout().num_units()).cut(groups->pipeline()->rank())
                 : workloads::StageCut{};
    setup.model = workloads::make_llama(setup.model_config, spec.precision, {groups->tensor(), o.sequence_parallel}, cut,
                                        {groups->context()}, {groups->expert()});
    schedulers::SchedulerArgs a = setup.args();
    a.world = &world;
    a.topology = &topology;
    a.groups = groups.get();
    a.options = o;
    scheduler = schedulers::make_scheduler(spec.scheduler, a);
  }
  schedulers::StepStats step(std::int64_t i) { return scheduler->step({i, setup.source.get()}); }

  /// Runs steps 0 and 1 and returns the counters' delta of step 1 on `world` (buckets settle on the first step).
  coll::CounterSnapshot second_step_counters(coll::Communicator& world) {
    step(0);
    const coll::CounterSnapshot before = world.counters().snapshot();
    step(1);
    return world.counters().delta(before);
  }

  /// The scheduler's plan for this run's model, training settings and `options`, for `rank` of `world_size`.
  schedulers::SchedulerPlan plan(const schedulers::SchedulerOptions& options, int world_size, int rank) const {
    return plan_for(scheduler_name, setup.model_config, setup.train, options, world_size, rank);
  }
};

/// The plan's activation estimate (the model's units walked over the rank's schedule) against one more step's peak
/// of the allocator's activation tag. Exact where no chunk of the rank receives its input (`receives` false: no
/// pipeline, or its first stage without interleaving); elsewhere the rank also holds the input gradients its
/// previous stage has not yet taken, which depends on timing, within the plan's bound.
inline void expect_activation_plan_matches_run(NdRun& run, const schedulers::SchedulerPlan& plan, bool receives) {
  run.setup.alloc->reset_peaks();
  run.step(2);
  const std::uint64_t peak = run.setup.alloc->stats().tag(AllocationTag::activation).peak_requested_bytes;
  EXPECT_GT(plan.activation_peak_bytes, 0u);
  EXPECT_EQ(plan.activation_waiting_bytes > 0, receives);
  if (!receives) {
    EXPECT_EQ(peak, plan.activation_peak_bytes);
    return;
  }
  EXPECT_GE(peak, plan.activation_peak_bytes);
  EXPECT_LE(peak, plan.activation_peak_bytes + plan.activation_waiting_bytes);
}

/// Ring attention's messages of one step on one rank, and their elements and bytes.
struct RingTraffic {
  std::int64_t messages = 0, elements = 0, bytes = 0;
};

/// The ring's messages of one step on a rank from the algorithm (not from the plan): per block held and
/// micro-batch run, K and V passed on cp − 1 times forward; K, V, dK and dV cp − 1 times backward plus the two
/// accumulators' last hop home; the forward's again under recompute; each B·(T/cp)·(KV/tp)·D fp32 elements.
inline RingTraffic ring_formula(int cp, int tp, bool recompute, const workloads::LlamaConfig& m,
                                std::int64_t micro_batch_size, std::int64_t micro_batches_per_rank,
                                std::int64_t blocks_here) {
  const std::int64_t per_mb = 2 * (cp - 1) + 4 * (cp - 1) + 2 + (recompute ? 2 * (cp - 1) : 0);
  const std::int64_t elements = micro_batch_size * (m.seq_len / cp) * (m.kv_heads / tp) * m.resolved_head_dim();
  RingTraffic t;
  t.messages = per_mb * micro_batches_per_rank * blocks_here;
  t.elements = t.messages * elements;
  t.bytes = t.elements * static_cast<std::int64_t>(sizeof(float));
  return t;
}

/// What the counters' delta `d` recorded on group "cp": sends (messages, elements, bytes) and receives (the
/// counters keep the bytes a rank sent; a receive has its messages and elements).
inline std::pair<RingTraffic, RingTraffic> ring_counted(const coll::CounterSnapshot& d) {
  RingTraffic sent, received;
  for (std::size_t g = 0; g < d.groups.size(); ++g) {
    if (d.groups[g] != "cp") continue;
    const coll::OpTotals& s = d.per_group[g][static_cast<int>(coll::CollOp::send)];
    const coll::OpTotals& r = d.per_group[g][static_cast<int>(coll::CollOp::recv)];
    sent.messages += static_cast<std::int64_t>(s.calls);
    sent.elements += s.elements;
    received.messages += static_cast<std::int64_t>(r.calls);
    received.elements += r.elements;
    for (int l = 0; l < coll::kNumLinkLevels; ++l) sent.bytes += static_cast<std::int64_t>(s.level[l].bytes);
  }
  return {sent, received};
}


/// Captures the gradient tensors of a state dump, by name.
class GradCapture final : public schedulers::StateVisitor {
 public:
  void tensor(std::string_view component, std::string_view name, ConstTensorView full) override {
    if (component != "grad") return;
    const auto* p = full.as<const float>();
    grads[std::string(name)] = std::vector<float>(p, p + full.numel());
  }
  std::map<std::string, std::vector<float>> grads;
};

/// After step 0 of `none` and of `nd` (tensor parallelism off): every gradient tensor nd's rank holds against none's
/// of the same name, to `tolerance` relative L2.
inline void expect_step0_grads_match_none(schedulers::Scheduler& none, NdRun& nd, const std::string& label,
                                          double tolerance = 1e-5) {
  GradCapture g_none;
  none.visit_state(g_none);
  auto& dp = dynamic_cast<schedulers::DataParallelScheduler&>(*nd.scheduler);
  const std::vector<float> mine = dp.gather_gradient();
  const workloads::ParamLayout& layout = nd.setup.model->layout();
  ASSERT_EQ(static_cast<std::int64_t>(mine.size()), layout.total_numel()) << label;
  int seen = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    for (int t = 0; t < static_cast<int>(layout.unit(u).tensors.size()); ++t) {
      const workloads::ParamTensor& pt = layout.unit(u).tensors[static_cast<std::size_t>(t)];
      const auto it = g_none.grads.find(pt.name);
      ASSERT_TRUE(it != g_none.grads.end()) << label << ": " << pt.name;
      ASSERT_EQ(static_cast<std::int64_t>(it->second.size()), pt.numel()) << label << ": " << pt.name;
      EXPECT_LE(rel_l2(mine.data() + layout.tensor_offset(u, t), it->second.data(), pt.numel()), tolerance)
          << label << ": step-0 gradient of " << pt.name;
      ++seen;
    }
  EXPECT_GT(seen, 0) << label;
}

/// `run` against `none` (tiny, fp32, the same recompute) side by side for `steps` steps: loss and gradient norm to
/// 1e-5 relative every step (the loss as the largest difference over the run), and with `step0_grads` every step-0
/// gradient tensor (expect_step0_grads_match_none); `shape` edits the reference's model as the run's was edited.
inline void expect_matches_none(NdRun& run, bool recompute, const std::string& label, bool step0_grads,
                                int steps = 20, const std::function<void(workloads::LlamaConfig&)>& shape = nullptr) {
  TinySetup ref(workloads::Precision::fp32, shape);
  ref.train.recompute = recompute;
  auto none = schedulers::make_scheduler("none", ref.args());
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    const schedulers::StepStats want = none->step({i, ref.source.get()});
    const schedulers::StepStats got = run.step(i);
    worst = std::max(worst, rel_diff(got.loss, want.loss));
    EXPECT_LE(rel_diff(got.grad_norm, want.grad_norm), 1e-5) << label << " step " << i << " grad norm";
    if (i == 0 && step0_grads) expect_step0_grads_match_none(*none, run, label);
  }
  EXPECT_LE(worst, 1e-5) << label << ": largest relative loss difference over " << steps << " steps";
}

/// The transformer blocks of `layout` (the units between the embedding and the head that run).
inline std::int64_t blocks_held(const workloads::ParamLayout& layout) {
  std::int64_t blocks = 0;
  for (int u = 1; u + 1 < layout.num_units(); ++u) blocks += layout.unit(u).runs ? 1 : 0;
  return blocks;
}

/// The ring's sends and receives on group "cp" in one step's counters `d` of `run` against ring_formula, with the
/// run's model, micro-batches (over dp ranks) and blocks.
inline void expect_ring_traffic(const NdRun& run, const coll::CounterSnapshot& d, int cp, int tp, int dp) {
  const RingTraffic want =
      ring_formula(cp, tp, run.setup.train.recompute, run.setup.model_config, run.setup.train.micro_batch_size,
                   run.setup.train.micro_batches() / dp, blocks_held(run.setup.model->layout()));
  const auto [sent, received] = ring_counted(d);
  EXPECT_GT(want.messages, 0);
  EXPECT_EQ(sent.messages, want.messages);
  EXPECT_EQ(sent.elements, want.elements);
  EXPECT_EQ(sent.bytes, want.bytes);
  EXPECT_EQ(received.messages, want.messages);
  EXPECT_EQ(received.elements, want.elements);
}

}  // namespace hzp::test
