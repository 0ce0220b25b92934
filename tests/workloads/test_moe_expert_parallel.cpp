// The routed experts under expert parallelism (moe_expert_parallel.cpp) under mpiexec, in fp64: every rank holds
// E/ep experts and routes its own tokens. Forward: each rank's output equals the plain token loop of
// moe_reference.hpp over its tokens with the WHOLE layer's weights (so dispatch and combine lose and misplace
// nothing, with and without capacity drops). Backward: each rank's input gradient and router gradient equal the
// single-rank layer's on its tokens, and each expert piece's gradient equals the single-rank gradients of that
// expert summed over the ranks (the single-rank backward is itself checked by finite differences in test_moe.cpp);
// sampled elements of every input and expert piece against central differences of the group's objective
// Σ_r <dy_r, y_r>, perturbing one rank at a time. The all-to-all-v's bytes per call equal the closed form from the
// routing: rows sent to experts on other ranks (and received back from them) × d × 8 bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/memory_backing.hpp"
#include "hzp/workloads/moe.hpp"
#include "moe_reference.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {

// The layer every rank holds (the same seed) with this rank's own tokens.
Problem rank_problem(RouterScore score, double capacity, int rank) {
  Problem p = make_problem(score, MoeBalance::bias, capacity, true, 5);
  const Problem tokens = make_problem(score, MoeBalance::bias, capacity, true, 100 + static_cast<unsigned>(rank));
  p.h = tokens.h;
  return p;
}

// Experts [r·El, (r+1)·El) of an [E, a, b] weight.
std::vector<double> piece(const std::vector<double>& w, std::int64_t E, int ranks, int r) {
  const std::size_t per = w.size() / static_cast<std::size_t>(ranks);
  (void)E;
  return {w.begin() + static_cast<std::ptrdiff_t>(per) * r, w.begin() + static_cast<std::ptrdiff_t>(per) * (r + 1)};
}

struct Pieces {
  std::vector<double> wg, wu, wd;
};

Pieces pieces_of(const Problem& p, int ranks, int r) {
  return {piece(p.wg, p.c.experts, ranks, r), piece(p.wu, p.c.experts, ranks, r), piece(p.wd, p.c.experts, ranks, r)};
}

workloads::MoeExpertWeights piece_weights(const Problem& p, const Pieces& w, int ranks) {
  const std::int64_t El = p.c.experts / ranks, F = p.c.expert_ffn;
  return {view(p.router, Shape{p.c.experts, p.d}), view(w.wg, Shape{El, F, p.d}), view(w.wu, Shape{El, F, p.d}),
          view(w.wd, Shape{El, p.d, F})};
}

std::vector<double> ep_forward(const Problem& p, const Pieces& w, coll::Communicator& ep, CachingAllocator& alloc,
                               workloads::MoeSaved& saved) {
  std::vector<double> y(static_cast<std::size_t>(p.N * p.d), 0.0);
  workloads::moe_experts_forward(p.c, view(p.h, Shape{p.N, p.d}), piece_weights(p, w, ep.size()), p.bias, 0.0,
                                 view(y, Shape{p.N, p.d}), saved, alloc, StreamRef::host(), &ep);
  return y;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double max_diff(const double* a, const double* b, std::size_t n) {
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Rows this rank's routing sends to experts held by other ranks (dispatch) and rows other ranks send to this rank's
// experts (what comes back in the combine), from every rank's routing worked out here.
std::pair<std::int64_t, std::int64_t> remote_rows(RouterScore score, double capacity, int ranks, int me) {
  std::int64_t out = 0, in = 0;
  for (int r = 0; r < ranks; ++r) {
    const Problem p = rank_problem(score, capacity, r);
    const std::int64_t E = p.c.experts, El = E / ranks;
    std::vector<double> logits(static_cast<std::size_t>(p.N * E), 0.0);
    for (std::int64_t t = 0; t < p.N; ++t)
      for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t i = 0; i < p.d; ++i)
          logits[static_cast<std::size_t>(t * E + e)] +=
              p.h[static_cast<std::size_t>(t * p.d + i)] * p.router[static_cast<std::size_t>(e * p.d + i)];
    const workloads::MoeRouting rt = workloads::route_tokens(p.c, logits, p.bias, p.N);
    for (std::int64_t e = 0; e < E; ++e) {
      const std::int64_t n = rt.offsets[static_cast<std::size_t>(e + 1)] - rt.offsets[static_cast<std::size_t>(e)];
      const int owner = static_cast<int>(e / El);
      if (r == me && owner != me) out += n;
      if (r != me && owner == me) in += n;
    }
  }
  return {out, in};
}

void check_forward(coll::Communicator& ep, RouterScore score, double capacity) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const Problem p = rank_problem(score, capacity, ep.rank());
  const Pieces w = pieces_of(p, ep.size(), ep.rank());
  std::int64_t want_dropped = 0;
  const std::vector<double> want = reference_forward(p, &want_dropped);
  const coll::CounterSnapshot before = ep.counters().snapshot();
  workloads::MoeSaved saved;
  const std::vector<double> got = ep_forward(p, w, ep, alloc, saved);
  const coll::CounterSnapshot d = ep.counters().delta(before);
  const std::string label = std::string(workloads::to_string(score)) + " cf=" + std::to_string(capacity) + " ep=" +
                            std::to_string(ep.size()) + " rank " + std::to_string(ep.rank());
  EXPECT_GT(max_abs(want), 0.1) << label;
  EXPECT_LT(max_diff(got.data(), want.data(), want.size()), 1e-12 * max_abs(want)) << label;
  EXPECT_EQ(saved.routing.dropped, want_dropped) << label;
  // One all-to-all of the counts, two all-to-all-v (dispatch, combine); bytes only to the other ranks.
  const coll::OpTotals a2a = d.total(ep.name(), coll::CollOp::all_to_all);
  const coll::OpTotals a2av = d.total(ep.name(), coll::CollOp::all_to_allv);
  EXPECT_EQ(a2a.calls, 1u) << label;
  EXPECT_EQ(a2a.elements, p.c.experts) << label;
  EXPECT_EQ(a2av.calls, 2u) << label;
  const auto [out, in] = remote_rows(score, capacity, ep.size(), ep.rank());
  std::uint64_t bytes = 0;
  for (int l = 0; l < coll::kNumLinkLevels; ++l) bytes += a2av.level[l].bytes;
  EXPECT_EQ(bytes, static_cast<std::uint64_t>((out + in) * p.d) * sizeof(double)) << label;
  EXPECT_GT(out + in, 0) << label << ": the test should move rows between ranks";
}

TEST(MoeExpertParallel, ForwardMatchesTheTokenLoopOverTheWholeLayer) {
  HZP_REQUIRE_MIN_RANKS(2);
  const int w = world_size(), r = world_rank();
  if (4 % w != 0) GTEST_SKIP() << "the layer's 4 experts need ep dividing 4";
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  run_then_barrier([&] {
    check_forward(*world, RouterScore::sigmoid, 0);
    check_forward(*world, RouterScore::softmax, 0);
    check_forward(*world, RouterScore::sigmoid, 1.0);  // capacity: drops decided on the sender, as on one rank
  }, 60);
}

void check_backward(coll::Communicator& ep, coll::Communicator& scalars, double capacity) {
  HostBacking backing;
  CachingAllocator alloc(backing);
  const int P = ep.size(), me = ep.rank();
  Problem p = rank_problem(RouterScore::sigmoid, capacity, me);
  Pieces w = pieces_of(p, P, me);
  const std::int64_t E = p.c.experts, El = E / P, F = p.c.expert_ffn, N = p.N, d = p.d;
  std::mt19937_64 gen(40 + static_cast<unsigned>(me));
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> dy(static_cast<std::size_t>(N * d));
  for (double& v : dy) v = nd(gen);

  // Expert parallel: input, router and piece gradients.
  std::vector<double> dh(p.h.size(), 0.0), dr(p.router.size()), dg(w.wg.size()), du(w.wu.size()), dd(w.wd.size());
  {
    workloads::MoeSaved saved;
    (void)ep_forward(p, w, ep, alloc, saved);
    workloads::moe_experts_backward(p.c, view(dy, Shape{N, d}), view(p.h, Shape{N, d}), piece_weights(p, w, P),
                                    {view(dr, Shape{E, d}), view(dg, Shape{El, F, d}), view(du, Shape{El, F, d}),
                                     view(dd, Shape{El, d, F}), false},
                                    view(dh, Shape{N, d}), saved, alloc, StreamRef::host(), &ep);
    EXPECT_FALSE(saved.held());
  }
  // One rank alone on its tokens with the whole layer; its expert gradients summed over the ranks.
  std::vector<double> rh(p.h.size(), 0.0), rr(p.router.size()), rg(p.wg.size()), ru(p.wu.size()), rd(p.wd.size());
  {
    std::vector<double> y(static_cast<std::size_t>(N * d), 0.0);
    workloads::MoeSaved saved;
    workloads::moe_experts_forward(p.c, view(p.h, Shape{N, d}), weights(p), p.bias, 0.0, view(y, Shape{N, d}), saved,
                                   alloc, StreamRef::host());
    workloads::moe_experts_backward(p.c, view(dy, Shape{N, d}), view(p.h, Shape{N, d}), weights(p),
                                    {view(rr, Shape{E, d}), view(rg, Shape{E, F, d}), view(ru, Shape{E, F, d}),
                                     view(rd, Shape{E, d, F}), false},
                                    view(rh, Shape{N, d}), saved, alloc, StreamRef::host());
  }
  for (std::vector<double>* g : {&rg, &ru, &rd})
    scalars.all_reduce(TensorView(g->data(), Shape{static_cast<std::int64_t>(g->size())}, DType::f64),
                       coll::ReduceOp::sum, StreamRef::host());
  const std::string label = "cf=" + std::to_string(capacity) + " ep=" + std::to_string(P) + " rank " + std::to_string(me);
  EXPECT_LT(max_diff(dh.data(), rh.data(), dh.size()), 1e-12 * max_abs(rh)) << label << ": input gradient";
  EXPECT_LT(max_diff(dr.data(), rr.data(), dr.size()), 1e-12 * max_abs(rr)) << label << ": router gradient";
  const std::size_t per = dg.size();
  EXPECT_LT(max_diff(dg.data(), rg.data() + per * me, per), 1e-12 * max_abs(rg)) << label << ": w_gate pieces";
  EXPECT_LT(max_diff(du.data(), ru.data() + per * me, per), 1e-12 * max_abs(ru)) << label << ": w_up pieces";
  EXPECT_LT(max_diff(dd.data(), rd.data() + dd.size() * me, dd.size()), 1e-12 * max_abs(rd)) << label << ": w_down pieces";

  // Central differences of the group's objective, one rank's element at a time (every rank runs every forward).
  auto objective = [&] {
    workloads::MoeSaved saved;
    const std::vector<double> y = ep_forward(p, w, ep, alloc, saved);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += dy[i] * y[i];
    scalars.all_reduce(TensorView(&l, Shape{1}, DType::f64), coll::ReduceOp::sum, StreamRef::host());
    return l;
  };
  const double eps = 1e-6;
  struct Target {
    const char* name;
    std::vector<double>* x;
    const std::vector<double>* grad;
  };
  for (const Target& t : {Target{"h", &p.h, &dh}, Target{"w_gate", &w.wg, &dg}, Target{"w_up", &w.wu, &du},
                          Target{"w_down", &w.wd, &dd}})
    for (int owner = 0; owner < P; ++owner)
      for (std::size_t i = 0; i < t.x->size(); i += t.x->size() / 5 + 1) {
        double& v = (*t.x)[i];
        const double keep = v;
        if (me == owner) v = keep + eps;
        const double up = objective();
        if (me == owner) v = keep - eps;
        const double down = objective();
        v = keep;
        if (me != owner) continue;
        const double fd = (up - down) / (2 * eps), an = (*t.grad)[i];
        EXPECT_NEAR(an, fd, 1e-6 * std::max(1.0, std::abs(fd))) << label << ": " << t.name << "[" << i << "]";
      }
}

TEST(MoeExpertParallel, BackwardMatchesOneRankAndFiniteDifferences) {
  HZP_REQUIRE_MIN_RANKS(2);
  const int w = world_size(), r = world_rank();
  if (4 % w != 0) GTEST_SKIP() << "the layer's 4 experts need ep dividing 4";
  auto world = coll::make_mpi_world(coll::Topology::virtual_nodes(w, w, r), coll::MpiCommConfig{});
  auto scalars = world->duplicate("scalars");
  run_then_barrier([&] {
    check_backward(*world, *scalars, 0);
    check_backward(*world, *scalars, 1.0);
  }, 120);
}

}  // namespace
}  // namespace hzp::test
