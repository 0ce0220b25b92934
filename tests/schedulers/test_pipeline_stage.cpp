// PipelineStage (hzp/schedulers/step/pipeline_stage.hpp) under mpiexec at 2 and 4 ranks, one stage per rank:
// GPipe, 1F1B and interleaved 1F1B (v = 2) over a small Llama in fp64, tied and untied, with and without
// recompute. The stages' gradients summed over the ranks (each unit's written by its own stage; a tied table's by
// the first and the last) and the last stage's losses equal the whole model's run on every rank without
// communication (the independent reference): loss to 1e-12, every gradient element to 1e-12 of the largest —
// a pipeline reorders no sum inside a unit, only the tied table's two contributions.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../support/mpi_test.hpp"
#include "../workloads/model_test_util.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/schedulers/step/pipeline_stage.hpp"
#include "hzp/workloads/llama.hpp"

namespace hzp::test {
namespace {

using schedulers::Action;
using schedulers::PipelineLayout;
using schedulers::PipelineScheduleKind;
using workloads::Precision;

workloads::LlamaConfig pipeline_llama(bool tied, int layers) {
  workloads::LlamaConfig c = shrunk_llama(tied);
  c.layers = layers;
  return c;
}

void expect_pipeline_matches(coll::Communicator& world, PipelineScheduleKind kind, int v, bool tied, bool recompute) {
  const int pp = world.size(), m = 2 * pp;
  const workloads::LlamaConfig cfg = pipeline_llama(tied, 2 * pp);  // two blocks per chunk at v = 1, one at v = 2
  const auto model = workloads::make_llama(cfg, Precision::fp64);
  const workloads::ParamLayout& layout = model->layout();
  HostBacking backing;
  CachingAllocator alloc(backing);
  const auto mbs = split(random_sequences(m, cfg.seq_len, cfg.vocab, 5), 1, cfg.seq_len);
  const double norm = static_cast<double>(m * cfg.seq_len);
  auto params = initial_params<double>(*model, 11);

  std::vector<double> want(params.size(), 0.0);
  const double want_loss = run_micro_batches(*model, flat_view(params), flat_view(want), mbs, norm, recompute, alloc);

  const PipelineLayout pl = PipelineLayout::balanced(layout.num_units(), pp, v);
  const std::vector<Action> actions = schedulers::pipeline_schedule(kind, pl, world.rank(), m);
  schedulers::PipelineStage stage(*model, pl, world, alloc, {.micro_batch_size = 1, .recompute = recompute});
  std::vector<double> grads(params.size(), 0.0);
  schedulers::PipelineStage::Hooks hooks;
  hooks.params = [&](int u, const Action&) { return workloads::unit_params_from_flat(layout, u, flat_view(params)); };
  hooks.grads = [&](int u, const Action& a) {
    return workloads::unit_grads_from_flat(layout, u, flat_view(grads), a.micro_batch == 0);
  };
  hooks.tokens = [&](int mb, std::span<std::int32_t> in, std::span<std::int32_t> tg, std::vector<std::int32_t>& first) {
    first.clear();  // one document per sequence
    std::copy(mbs[static_cast<std::size_t>(mb)].inputs.begin(), mbs[static_cast<std::size_t>(mb)].inputs.end(), in.begin());
    std::copy(mbs[static_cast<std::size_t>(mb)].targets.begin(), mbs[static_cast<std::size_t>(mb)].targets.end(), tg.begin());
  };
  const std::vector<double> losses = stage.run(actions, m, norm, hooks);
  EXPECT_GE(stage.wait_seconds(), 0.0);

  double loss = 0;
  for (double l : losses) loss += l;
  world.all_reduce(TensorView(&loss, Shape{1}, DType::f64), coll::ReduceOp::sum, StreamRef::host());
  world.all_reduce(flat_view(grads), coll::ReduceOp::sum, StreamRef::host());

  const std::string label = std::string(schedulers::to_string(kind)) + " v=" + std::to_string(v) + " pp=" +
                            std::to_string(pp) + (tied ? " tied" : " untied") + (recompute ? " recompute" : "") +
                            " rank " + std::to_string(world.rank());
  EXPECT_NEAR(loss, want_loss, 1e-12 * std::abs(want_loss)) << label;
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    worst = std::max(worst, std::abs(grads[i] - want[i]));
  }
  EXPECT_LE(worst, 1e-12 * scale) << label << ": largest gradient difference " << worst;
}

TEST(PipelineStage, EveryScheduleGivesTheWholeModelsLossAndGradients) {
  HZP_REQUIRE_RANKS_DIVISIBLE_BY(2);
  const int w = world_size(), r = world_rank();
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  for (bool tied : {true, false})
    for (bool recompute : {false, true}) {
      expect_pipeline_matches(*world, PipelineScheduleKind::gpipe, 1, tied, recompute);
      expect_pipeline_matches(*world, PipelineScheduleKind::one_f_one_b, 1, tied, recompute);
      expect_pipeline_matches(*world, PipelineScheduleKind::interleaved, 2, tied, recompute);
    }
}

}  // namespace
}  // namespace hzp::test
