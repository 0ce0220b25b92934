// PipelineLayout and the GPipe, 1F1B and interleaved 1F1B action lists (pipeline_schedule.hpp).
#include "hzp/schedulers/step/pipeline_schedule.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

std::string_view to_string(PipelineScheduleKind k) { return name_of(kPipelineScheduleNames, k); }

std::string PipelineLayout::describe() const {
  std::ostringstream o;
  for (int s = 0; s < pp; ++s) {
    o << (s ? "; " : "") << "stage " << s << ": units";
    for (int c = 0; c < v; ++c) o << " [" << first_unit(chunk_of(s, c)) << "," << end_unit(chunk_of(s, c)) << ")";
  }
  return o.str();
}

int PipelineLayout::chunk_at(const Action& a) const {
  for (int k = 0; k < chunks(); ++k)
    if (first_unit(k) == a.first_unit && end_unit(k) == a.end_unit) return k;
  HZP_THROW(PreconditionError, "pipeline layout: ", to_string(a), " covers no chunk of '", describe(), "'");
}

workloads::StageCut PipelineLayout::cut(int stage) const {
  HZP_CHECK(stage >= 0 && stage < pp, "pipeline layout: stage ", stage, " of ", pp);
  workloads::StageCut c;
  c.stage = stage;
  c.stage_of_unit.resize(static_cast<std::size_t>(units()));
  for (int k = 0; k < chunks(); ++k)
    for (int u = first_unit(k); u < end_unit(k); ++u) c.stage_of_unit[static_cast<std::size_t>(u)] = k % pp;
  return c;
}

namespace {

// Boundaries from the blocks of each chunk (model order), the embedding (unit 0) before the first block and the
// head (the last unit) after the last.
PipelineLayout from_chunk_blocks(int units, int pp, int v, const std::vector<int>& blocks) {
  PipelineLayout l;
  l.pp = pp;
  l.v = v;
  l.bounds.push_back(0);
  int at = 1;  // the first block
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    at += blocks[k];
    l.bounds.push_back(k + 1 == blocks.size() ? units : at);
  }
  return l;
}

}  // namespace

PipelineLayout PipelineLayout::balanced(int units, int pp, int v) {
  const int blocks = units - 2, chunks = pp * v;
  if (pp < 1 || v < 1 || blocks < chunks)
    HZP_THROW(ConfigError, "pipeline: scheduler.pp = ", pp, " stages of scheduler.virtual_stages = ", v,
              " chunks need at least ", chunks, " transformer blocks (one per chunk), but the model has ", blocks,
              ". Fix: fewer stages or chunks, or more model.layers");
  std::vector<int> per(static_cast<std::size_t>(chunks), blocks / chunks);
  for (int k = 0; k < blocks % chunks; ++k) ++per[static_cast<std::size_t>(k)];
  return from_chunk_blocks(units, pp, v, per);
}

PipelineLayout PipelineLayout::from_blocks(int units, const std::vector<int>& blocks_per_stage) {
  const int blocks = units - 2;
  const int sum = std::accumulate(blocks_per_stage.begin(), blocks_per_stage.end(), 0);
  const bool positive = std::all_of(blocks_per_stage.begin(), blocks_per_stage.end(), [](int b) { return b > 0; });
  if (blocks_per_stage.empty() || !positive || sum != blocks) {
    std::ostringstream list;
    for (int b : blocks_per_stage) list << (list.tellp() > 0 ? ", " : "") << b;
    HZP_THROW(ConfigError, "pipeline: scheduler.pp_layers = [", list.str(), "] must list a positive block count per "
              "stage summing to the model's ", blocks, " blocks (it sums to ", sum, "). Fix: counts summing to ", blocks,
              ", or an empty scheduler.pp_layers for balanced stages");
  }
  return from_chunk_blocks(units, static_cast<int>(blocks_per_stage.size()), 1, blocks_per_stage);
}

namespace {

Action chunk_action(const PipelineLayout& l, Action::Kind kind, int stage, int c, int micro_batch) {
  const int k = l.chunk_of(stage, c);
  return Action{kind, micro_batch, l.first_unit(k), l.end_unit(k)};
}

}  // namespace

std::vector<Action> pipeline_schedule(PipelineScheduleKind kind, const PipelineLayout& l, int stage, int m) {
  HZP_CHECK(stage >= 0 && stage < l.pp && m >= 1, "pipeline_schedule: stage ", stage, " of ", l.pp, ", ", m,
            " micro-batches");
  const bool interleaved = kind == PipelineScheduleKind::interleaved;
  if (interleaved != (l.v > 1))
    HZP_THROW(ConfigError, "pipeline: scheduler.schedule = ", to_string(kind), " with scheduler.virtual_stages = ",
              l.v, ": the interleaved schedule needs v >= 2 chunks per stage and the others run one. Fix: ",
              interleaved ? "virtual_stages >= 2" : "virtual_stages = 1, or schedule = interleaved");
  if (interleaved && m % l.pp != 0)
    HZP_THROW(ConfigError, "pipeline: the interleaved schedule runs micro-batches in groups of scheduler.pp = ", l.pp,
              ", but a stage has ", m, " micro-batches per step. Fix: train.global_batch / train.micro_batch_size / dp "
              "a multiple of ", l.pp);
  using K = Action::Kind;
  std::vector<Action> out;
  if (kind == PipelineScheduleKind::gpipe) {
    for (int i = 0; i < m; ++i) out.push_back(chunk_action(l, K::forward, stage, 0, i));
    for (int i = 0; i < m; ++i) out.push_back(chunk_action(l, K::backward, stage, 0, i));
    return out;
  }
  // Forward and backward k of the m·v a stage runs. At v = 1 (1F1B) both are simply micro-batch k on the one chunk;
  // the schedules differ only in their warm-up.
  const int pv = l.pp * l.v, total = m * l.v;
  auto forward = [&](int k) {
    return chunk_action(l, K::forward, stage, (k % pv) / l.pp, (k / pv) * l.pp + k % l.pp);
  };
  auto backward = [&](int k) {
    return chunk_action(l, K::backward, stage, l.v - 1 - (k % pv) / l.pp, (k / pv) * l.pp + k % l.pp);
  };
  const int warm = !interleaved ? std::min(l.pp - stage - 1, m)
                   : m == l.pp  ? total
                                : std::min((l.pp - stage - 1) * 2 + (l.v - 1) * l.pp, total);
  for (int k = 0; k < warm; ++k) out.push_back(forward(k));
  for (int k = warm; k < total; ++k) {
    out.push_back(forward(k));
    out.push_back(backward(k - warm));
  }
  for (int k = total - warm; k < total; ++k) out.push_back(backward(k));
  return out;
}

void check_stage_schedule(const std::vector<Action>& actions, const PipelineLayout& l, int stage, int m) {
  // Per micro-batch: how many of the stage's chunks have run forward, and backward (backward in reverse order).
  std::vector<int> fwd(static_cast<std::size_t>(m), 0), bwd(static_cast<std::size_t>(m), 0);
  for (const Action& a : actions) {
    HZP_CHECK(a.micro_batch >= 0 && a.micro_batch < m, "stage ", stage, " schedule: ", to_string(a),
              " names micro-batch ", a.micro_batch, " of ", m);
    const auto i = static_cast<std::size_t>(a.micro_batch);
    if (a.kind == Action::Kind::forward) {
      HZP_CHECK(fwd[i] < l.v, "stage ", stage, " schedule: ", to_string(a), " is a forward too many");
      const int k = l.chunk_of(stage, fwd[i]);
      HZP_CHECK(a.first_unit == l.first_unit(k) && a.end_unit == l.end_unit(k), "stage ", stage, " schedule: ",
                to_string(a), " is not micro-batch ", a.micro_batch, "'s next chunk [", l.first_unit(k), ",",
                l.end_unit(k), ")");
      ++fwd[i];
    } else {
      // The loss is after the last chunk: no backward before the micro-batch's every forward on this stage.
      HZP_CHECK(fwd[i] == l.v && bwd[i] < l.v, "stage ", stage, " schedule: ", to_string(a),
                " runs before the micro-batch's forwards finished, or once too often");
      const int k = l.chunk_of(stage, l.v - 1 - bwd[i]);
      HZP_CHECK(a.first_unit == l.first_unit(k) && a.end_unit == l.end_unit(k), "stage ", stage, " schedule: ",
                to_string(a), " is not micro-batch ", a.micro_batch, "'s next backward chunk [", l.first_unit(k), ",",
                l.end_unit(k), ")");
      ++bwd[i];
    }
  }
  for (int i = 0; i < m; ++i)
    HZP_CHECK(fwd[static_cast<std::size_t>(i)] == l.v && bwd[static_cast<std::size_t>(i)] == l.v, "stage ", stage,
              " schedule: micro-batch ", i, " does not run each of the stage's ", l.v, " chunks forward and backward");
}

int max_in_flight(const std::vector<Action>& actions, int v) {
  int live = 0, most = 0;
  for (const Action& a : actions) {
    live += a.kind == Action::Kind::forward ? 1 : -1;
    most = std::max(most, live);
  }
  return (most + v - 1) / v;
}

}  // namespace hzp::schedulers
