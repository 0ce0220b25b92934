// Helpers for the data-parallel scheduler tests: the configurations each registered scheduler is tested
// in (a registered name without one fails the matrix instead of being skipped), a run of one scheduler on
// the `tiny` preset over an MPI world, the `none` reference (with micro-batches optionally accumulated in
// reverse order, to measure the spread of two summation orders), the plan-against-counters check, and small
// numeric helpers.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hzp/collectives/counters.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/schedulers/data_parallel.hpp"
#include "hzp/schedulers/none.hpp"
#include "hzp/schedulers/plan.hpp"
#include "hzp/workloads/data/markov_source.hpp"
#include "hzp/workloads/presets.hpp"
#include "../support/mpi_test.hpp"
#include "none_test_util.hpp"

namespace hzp::test {

/// One tested configuration of a registered scheduler.
struct Variant {
  std::string scheduler;
  schedulers::SchedulerOptions options;
  std::string label;  ///< "hsdp Z=2", "ddp bucket 0.01 MiB blocking"
};

/// The configurations of registered scheduler `name` at world size w. `none` is the reference (no
/// variants). A registered name this function does not know adds a test failure: a new scheduler must
/// be given its configurations here (or a stated reason why it does not run at w).
inline std::vector<Variant> variants_for(const std::string& name, int w) {
  std::vector<Variant> v;
  if (name == "none") return v;
  if (name == "ddp") {
    v.push_back({name, {.bucket_mb = 25, .overlap = true, .group_size = 0}, "ddp one bucket, overlapped"});
    v.push_back({name, {.bucket_mb = 0.05, .overlap = false, .group_size = 0}, "ddp 0.05 MiB buckets, blocking"});
    v.push_back({name, {.bucket_mb = 0.05, .overlap = true, .group_size = 0}, "ddp 0.05 MiB buckets, overlapped"});
  } else if (name == "zero1" || name == "zero2" || name == "zero3") {
    v.push_back({name, {}, name});
  } else if (name == "hsdp") {
    v.push_back({name, {.bucket_mb = 25, .overlap = true, .group_size = w / 2}, "hsdp Z=" + std::to_string(w / 2)});
    v.push_back({name, {.bucket_mb = 25, .overlap = true, .group_size = w}, "hsdp Z=W=" + std::to_string(w)});
  } else if (name == "asynchzp") {
    // CI: z3 < z2 < z1 inline with the all-reduce step end, and async (prefetch 2) with the reduce-scatter
    // step end over z3 <= z2 < z1, per tensor below 8 ranks; the full matrix adds the hsdp-like layout
    // z1 = z2 = z3 = W/2 async per unit, prefetch 1, and the two step ends swapped.
    using SO = schedulers::SchedulerOptions;
    const int h = std::max(1, w / 2), q = std::max(1, w / 4);
    auto add = [&](int z1, int z2, int z3, SO::StepEnd end, bool async, int prefetch, SO::Launch launch) {
      SO o;
      o.z1 = z1, o.z2 = z2, o.z3 = z3, o.step_end = end, o.async = async, o.prefetch = prefetch, o.launch = launch;
      std::string label = "asynchzp " + std::to_string(z1) + "/" + std::to_string(z2) + "/" + std::to_string(z3) +
                          (end == SO::StepEnd::all_reduce ? " allreduce" : " reduce_scatter") +
                          (async ? " async p" + std::to_string(prefetch) : " inline") +
                          (launch == SO::Launch::unit ? " unit" : " tensor");
      v.push_back({name, o, label});
    };
    add(w, h, q, SO::StepEnd::all_reduce, false, 1, SO::Launch::unit);
    add(h, q, std::max(1, w / 8), SO::StepEnd::reduce_scatter, true, 2, w >= 8 ? SO::Launch::unit : SO::Launch::tensor);
    const char* e = std::getenv("HZP_DP_MATRIX");
    if (e != nullptr && std::string(e) == "full") {
      add(h, h, h, SO::StepEnd::all_reduce, true, 1, SO::Launch::unit);
      add(w, h, q, SO::StepEnd::reduce_scatter, false, 1, SO::Launch::tensor);
      add(h, q, q, SO::StepEnd::all_reduce, true, 2, SO::Launch::tensor);
    }
  } else if (name == "nd") {
    // The matrix's model is whole, so tp = 1 here: nd's two engines over every rank. Tensor parallelism needs the
    // model built over the tensor-parallel group: test_nd runs it.
    v.push_back({name, {}, "nd tp=1 replicas"});
    v.push_back({name, {.distributed_optimizer = true}, "nd tp=1 distributed optimizer"});
  } else {
    ADD_FAILURE() << "scheduler \"" << name << "\" is registered but has no test configuration in variants_for() "
                  << "(data_parallel_test_util.hpp): add its configurations, or state there why it cannot run at W = "
                  << w;
  }
  return v;
}

/// The engine a configuration runs, for formulas: nd at tp = 1 is ddp's (replicas) or zero1's (distributed
/// optimizer) over every rank; the others are their own.
inline std::string engine_of(const Variant& v) {
  if (v.scheduler == "nd") return v.options.distributed_optimizer ? "zero1" : "ddp";
  return v.scheduler;
}

/// Every configuration of every registered scheduler at world size w, in registry order.
inline std::vector<Variant> all_variants(int w) {
  std::vector<Variant> all;
  for (const std::string& n : schedulers::scheduler_names())
    for (Variant& v : variants_for(n, w)) all.push_back(std::move(v));
  return all;
}

/// A source whose micro-batch j of every step holds the samples of micro-batch n−1−j: the same global batch
/// with the micro-batches in reverse order (the reference's second summation order).
class ReversedMicroBatches final : public workloads::DataSource {
 public:
  ReversedMicroBatches(const workloads::DataSource& inner, std::int64_t global_batch, std::int64_t micro_batch)
      : inner_(inner), g_(global_batch), m_(micro_batch) {}
  std::int64_t vocab() const override { return inner_.vocab(); }
  std::int64_t seq_len() const override { return inner_.seq_len(); }
  workloads::Provenance provenance() const override { return inner_.provenance(); }

 protected:
  void sample_unchecked(std::int64_t i, std::span<std::int32_t> tokens) const override {
    const std::int64_t step = i / g_, within = i % g_, j = within / m_, b = within % m_, n = g_ / m_;
    inner_.sample(step * g_ + (n - 1 - j) * m_ + b, tokens);
  }

 private:
  const workloads::DataSource& inner_;
  std::int64_t g_, m_;
};

/// The model, data and allocator of one run on the `tiny` preset.
struct TinySetup {
  workloads::LlamaConfig model_config;
  workloads::TrainConfig train;
  workloads::MarkovChainParams chain;
  HostBacking backing;
  std::unique_ptr<CachingAllocator> alloc;
  std::unique_ptr<workloads::Workload> model;
  std::unique_ptr<workloads::MarkovSource> source;

  /// `shape`, when given, edits the model shape before the model is built (e.g. units smaller than W).
  explicit TinySetup(workloads::Precision precision,
                     const std::function<void(workloads::LlamaConfig&)>& shape = nullptr) {
    const auto& p = workloads::model_preset("tiny");
    model_config = p.model;
    if (shape) shape(model_config);
    train = p.train;
    train.precision = precision;
    train.steps = 20;  // the cosine's length; parity runs take at most 20 steps
    train.warmup_steps = 2;
    chain = p.chain;
    if (chain.vocab == 0) chain.vocab = model_config.vocab;
    alloc = std::make_unique<CachingAllocator>(backing);
    model = workloads::make_llama(model_config, precision);
    source = std::make_unique<workloads::MarkovSource>(chain, model_config.seq_len);
  }

  /// Scheduler arguments over this setup's model, training config and allocator (no communicator).
  schedulers::SchedulerArgs args() const { return scheduler_args(*this); }
};

/// An MPI world over MPI_COMM_WORLD with virtual nodes of `ranks_per_node`.
inline std::unique_ptr<coll::MpiCommunicator> make_world(int ranks_per_node, std::size_t small_message_bytes = 65536) {
  coll::MpiCommConfig cfg;
  cfg.small_message_bytes = small_message_bytes;
  return coll::make_mpi_world(coll::Topology::virtual_nodes(world_size(), ranks_per_node, world_rank()), cfg);
}

/// The plan's collectives summed per (group, op) against a run's counter delta over one step: calls,
/// elements and bytes per level; nothing run that was not planned, nothing planned that did not run. With
/// `routed_calls_only`, all_to_allv is compared by its calls only (the plan declares the balanced expectation of
/// elements the routing decides; expert parallelism's tests check those against the routing).
inline void expect_plan_matches_run(const schedulers::SchedulerPlan& plan, const coll::CounterSnapshot& d,
                                    bool routed_calls_only = false) {
  std::map<std::pair<std::string, int>, coll::OpTotals> planned;
  for (const auto& c : plan.collectives) {
    coll::OpTotals& t = planned[{c.group, static_cast<int>(c.op)}];
    t.calls += static_cast<std::uint64_t>(c.calls);
    t.elements += c.elements;
    for (int l = 0; l < coll::kNumLinkLevels; ++l) t.level[l].bytes += c.bytes[l];
  }
  for (std::size_t g = 0; g < d.groups.size(); ++g)
    for (int op = 0; op < coll::kNumCollOps; ++op) {
      const coll::OpTotals& got = d.per_group[g][op];
      if (got.calls == 0) continue;
      const std::string what = d.groups[g] + "/" + std::string(coll::coll_op_name(coll::CollOp(op)));
      const auto it = planned.find({d.groups[g], op});
      ASSERT_TRUE(it != planned.end()) << what << " ran but is not in the plan";
      EXPECT_EQ(got.calls, it->second.calls) << what;
      if (routed_calls_only && op == static_cast<int>(coll::CollOp::all_to_allv)) {
        planned.erase(it);
        continue;
      }
      EXPECT_EQ(got.elements, it->second.elements) << what;
      for (int l = 0; l < coll::kNumLinkLevels; ++l)
        EXPECT_EQ(got.level[l].bytes, it->second.level[l].bytes) << what << " level " << l;
      planned.erase(it);
    }
  for (const auto& [k, t] : planned) EXPECT_EQ(t.calls, 0u) << k.first << " planned but never ran";
}

inline double rel_diff(double a, double ref) { return std::abs(a - ref) / std::max(std::abs(ref), 1e-300); }

/// ||a − b|| / ||b|| over [begin, begin + n).
inline double rel_l2(const float* a, const float* b, std::int64_t n) {
  double d = 0, r = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    d += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    r += double(b[i]) * double(b[i]);
  }
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

}  // namespace hzp::test
